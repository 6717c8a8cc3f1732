"""Coordinator side; stdlib only. The one vocabulary for a box that could not be evaluated.

Every way one box can fail ends as a BoxError whose .kind is one of the report's
NotEvaluatedKind values, so what a transport, the box agent or the pipeline raises is what the
report shows, with no translation table in between:

* CharpinError (charpin_runner.errors)
  + BoxError                      one box, one kind, one line "<host>: <problem>; <fix>"  (4)
      reaching it:   dns, refused, timeout, auth, host-key, disconnected   (transport, ssh.py)
      making it:     provision-failed                                      (provision.py)
      its setup:     unsupported-box, setup-failed, no-sandbox            (box agent, pipeline)
      its snapshot:  snapshot-integrity                                    (box agent)
      its run:       runner-failed, receipt-refused, interrupted, timeout  (pipeline)

Foreign exceptions (paramiko, socket, OSError) are mapped to a BoxError at the boundary that
meets them (ssh.map_ssh_errors, the transports); anything else reaching boxrun.run_box is
reported as runner-failed with its type, never as a traceback.
"""

from __future__ import annotations

from typing import cast, get_args

from charpin_runner.errors import EXIT_NOT_EVALUATED, CharpinError

from charpin_coordinator.report import NotEvaluated, NotEvaluatedKind

KINDS: frozenset[str] = frozenset(get_args(NotEvaluatedKind))


class BoxError(CharpinError):
    """One box could not be evaluated; .kind says why, str(self) is the line to show."""

    exit_code = EXIT_NOT_EVALUATED

    def __init__(self, host: str, kind: NotEvaluatedKind, message: str, *, attempts: int = 1):
        prefix = f"{host}: "
        super().__init__(message if message.startswith(prefix) else prefix + message)
        self.host = host
        self.kind: NotEvaluatedKind = kind
        self.attempts = attempts

    def not_evaluated(self) -> NotEvaluated:
        """This failure as the report's NOT EVALUATED row."""
        return NotEvaluated(label=self.host, kind=self.kind, reason=str(self))


def kind_named(name: object) -> NotEvaluatedKind:
    """A kind the box agent sent, checked against the vocabulary (unknown: runner-failed)."""
    for kind in get_args(NotEvaluatedKind):
        if kind == name:
            return cast(NotEvaluatedKind, kind)
    return "runner-failed"


def last_lines(data: bytes, lines: int = 6) -> str:
    """The end of a program's output as one line (" | " between lines), for a failure reason."""
    text = data.decode("utf-8", "replace").strip().splitlines()
    return " | ".join(line.strip() for line in text[-lines:]) or "(no output)"

"""Exceptions and exit-code bits shared by runner and coordinator. Runs everywhere; stdlib only.

str(exc) is always one complete line a user can act on: the problem, then the fix.

* CharpinError               base; carries .exit_code
  + UsageError               bad flags or arguments                          (64)
  + ConfigError              bad [tool.charpin] value, ledger or pins file  (64)
  + IntegrityError           receipt refused, snapshot or path check failed (8)
  + RunError                 the test command could not be started          (4)
  + BoxStepError             a box-side step of charpin-remote failed;      (4)
                             .kind is the box's NOT EVALUATED kind
"""

from __future__ import annotations

# Exit-code bits (design §6). OR-ed together by the CLIs.
EXIT_CLEAN = 0
EXIT_TESTS_FAILED = 1
EXIT_DRIFT = 2
EXIT_NOT_EVALUATED = 4
EXIT_INTEGRITY = 8
EXIT_VACUOUS = 16
EXIT_USAGE = 64
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a process killed by it


class CharpinError(Exception):
    """Base of every error charpin reports without a traceback."""

    exit_code = EXIT_USAGE


class UsageError(CharpinError):
    """A flag, argument or command line is wrong."""

    exit_code = EXIT_USAGE


class ConfigError(CharpinError):
    """A configuration, ledger or pins file has a wrong type, key or value."""

    exit_code = EXIT_USAGE


class IntegrityError(CharpinError):
    """A receipt, snapshot or path failed a check; the input is refused."""

    exit_code = EXIT_INTEGRITY


class RunError(CharpinError):
    """The command under test could not be started at all."""

    exit_code = EXIT_NOT_EVALUATED


class BoxStepError(CharpinError):
    """A step charpin-remote asked a box to do failed; .kind names the NOT EVALUATED kind the
    coordinator reports (setup-failed, unsupported-box, snapshot-integrity, runner-failed)."""

    exit_code = EXIT_NOT_EVALUATED

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

"""Test helper: waiting on events, never on the clock. Stdlib only.

A *gate* is a FIFO that a hostile process waits on instead of sleeping before its late act
(editing a fixture after the session, writing a planted file): it opens the gate's reading
end first, then blocks until someone opens the writing end. After charpin returns, the test
asks whether anything still waits there (`waiting`): a process charpin killed holds no end of
the gate, so "nobody waits" proves the late act can never happen, without waiting for it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# Python lines for the waiting process: open the gate (without blocking), then, where the late
# act goes, block until released. Formatted with gate=<path>.
OPEN_GATE = "import os as _os, select as _select\n_gate = _os.open({gate!r}, _os.O_RDONLY | _os.O_NONBLOCK)\n"
AWAIT_GATE = "_select.select([_gate], [], [])\n"
# The same for a shell: opening a FIFO for reading blocks until a writer comes, and a process
# blocked in that open counts as one that waits.
SHELL_AWAIT_GATE = "exec 3<'{gate}'"


def make_gate(path: Path) -> Path:
    os.mkfifo(path)
    return path


def waiting(gate: Path) -> bool:
    """True while some process has gate open for reading (and so still waits to act); it is
    then released (it goes on with its late act, which the test sees as the failure)."""
    try:
        fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader: nobody waits there
            return False
        raise
    os.close(fd)
    return True

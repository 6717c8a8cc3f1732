"""The probe's record as it reaches the parent: a pipe the parent drains while the tests run. Runs
on boxes; stdlib only.

Rule 5 of the threat model: the record is not a file the test process could rewrite after the
fact (an atexit hook, a conftest) but the write end of a pipe handed to pytest as a file
descriptor. A thread of the parent reads every byte as it is written, so what was sent stays
sent: code in the test process can add lines (they are checked: see probe.py) but cannot take
back or edit one. The pipe ends when every process holding its write end is gone, which the
parent ensures by killing the test command's whole group (and under bubblewrap its namespace);
a writer that escaped is waited for only briefly.
"""

from __future__ import annotations

import os
import threading

# More than any real record (a report line is ~150 bytes; a million tests fit): past it the
# rest is drained and dropped, and the record says so.
MAX_RECORD_BYTES = 256 * 1024 * 1024
# How long the parent waits for the pipe's end once the test command's group is dead.
_DRAIN_SECONDS = 5.0
_CHUNK = 1 << 16


class RecordPipe:
    """One probe record: `write_fd` goes to the test command (pass_fds), the parent reads."""

    def __init__(self, cap: int = MAX_RECORD_BYTES) -> None:
        self._read_fd, self.write_fd = os.pipe()
        self._lock = threading.Lock()
        self._chunks: list[bytes] = []
        self._size = 0
        self._cap = cap
        self.overflowed = False
        self.open_after_run = False
        self._closed = False
        self._thread = threading.Thread(target=self._drain, name="charpin-record", daemon=True)
        self._thread.start()

    @property
    def option(self) -> str:
        """The probe's --charpin-receipt value for this pipe."""
        return f"fd:{self.write_fd}"

    def started(self) -> None:
        """The child holds the write end now: the parent's copy must go, or no end comes."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def finish(self) -> bytes:
        """Everything the probe sent. Call once every process of the run is dead."""
        self.started()
        self._thread.join(_DRAIN_SECONDS)
        with self._lock:
            # A process outside the run's group may still hold the write end: what it sends
            # from now on is not part of this record (the thread drains it and ends with it).
            self.open_after_run = self._thread.is_alive()
            self._closed = True
            return b"".join(self._chunks)

    def _drain(self) -> None:
        fd = self._read_fd
        try:
            while True:
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    break
                with self._lock:
                    if self._closed:
                        continue
                    if self._size + len(chunk) > self._cap:
                        self.overflowed = True
                        continue
                    self._chunks.append(chunk)
                    self._size += len(chunk)
        finally:
            os.close(fd)

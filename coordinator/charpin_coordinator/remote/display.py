"""Coordinator side; may import rich. Live progress of every box: phase and elapsed seconds.

On a terminal a rich Live table redraws in place; otherwise each phase change is one plain line
`[box] phase (12.3s)`. Progress goes to stderr so stdout stays clean for `--json`; box output is
never streamed (it lives in files on the box), so nothing from two boxes can interleave.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import IO, TYPE_CHECKING

# An alias with ESC, a newline or a direction mark must not repaint or reorder the terminal:
# it is shown escaped, exactly as in the reports.
from charpin_coordinator.reports.escape import shown

if TYPE_CHECKING:
    from rich.table import Table


class Progress:
    """Thread-safe phase tracker; subclasses decide how a change is shown."""

    def __init__(self, labels: Sequence[str]):
        self._lock = threading.Lock()
        self._started = {label: time.monotonic() for label in labels}
        self._phase = dict.fromkeys(labels, "waiting")
        self._since = dict(self._started)

    def phase(self, label: str, name: str) -> None:
        """Record that box `label` entered phase `name`."""
        now = time.monotonic()
        with self._lock:
            self._phase[label], self._since[label] = name, now
            self._show(label, name, now - self._started.get(label, now))

    def rows(self) -> list[tuple[str, str, float]]:
        """(label, phase, elapsed) for every box."""
        now = time.monotonic()
        with self._lock:
            return [
                (label, self._phase[label], now - start) for label, start in self._started.items()
            ]

    def _show(self, label: str, name: str, elapsed: float) -> None:
        """Called under the lock."""

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


class PlainProgress(Progress):
    """One line per phase change, prefixed with the box alias."""

    def __init__(self, labels: Sequence[str], stream: IO[str] | None = None):
        super().__init__(labels)
        self._stream = stream or sys.stderr

    def _show(self, label: str, name: str, elapsed: float) -> None:
        print(f"[{shown(label)}] {name} ({elapsed:.1f}s)", file=self._stream, flush=True)


class LiveProgress(Progress):
    """A rich table redrawn in place while boxes run."""

    def __init__(self, labels: Sequence[str]):
        # rich is imported only when a terminal will show it (it costs every run start-up time).
        from rich.console import Console
        from rich.live import Live

        super().__init__(labels)
        self._live = Live(
            console=Console(stderr=True),
            refresh_per_second=4,
            get_renderable=self._table,
            transient=False,
        )

    def _table(self) -> Table:
        from rich.table import Table

        table = Table(title="charpin-remote run", show_edge=False)
        table.add_column("box")
        table.add_column("phase")
        table.add_column("elapsed", justify="right")
        from rich.text import Text

        for label, name, elapsed in self.rows():
            style = {"done": "green", "not evaluated": "red"}.get(name, "")
            # Text, not str: rich would read `[...]` in an alias as markup.
            table.add_row(Text(shown(label)), Text(name), Text(f"{elapsed:.1f}s"), style=style)
        return table

    def __enter__(self) -> Progress:
        self._live.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._live.stop()


def make_progress(labels: Sequence[str], *, quiet: bool = False) -> Progress:
    """A live table on a terminal, plain lines otherwise, nothing when quiet."""
    if quiet:
        return Progress(labels)
    if sys.stdout.isatty() and sys.stderr.isatty():
        return LiveProgress(labels)
    return PlainProgress(labels)

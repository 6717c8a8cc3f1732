"""What the tests' code did in the files a patch changes: the lines that ran (change coverage) and
the arguments of calls into the changed functions (captured calls). Runs inside the tests'
pytest; stdlib only.

Only the named files are traced. On Python 3.12+ `sys.monitoring` is told to stop reporting
every other code object after its first start, so the rest of the suite runs at full speed; on
older Pythons a `sys.settrace` function that returns at once for other files does the same, at
the cost of one call per function entry. Captured arguments are pickled at the moment of the
call (what the function received, not what it later did to it), within a budget of calls per
function and of bytes in all; a call whose arguments cannot be pickled is counted, never dropped
silently.
"""

from __future__ import annotations

import base64
import os
import pickle
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

CALLS_PER_FUNCTION = 20
CALL_BYTES = 256 * 1024  # one call's pickled arguments
TOTAL_BYTES = 4 * 1024 * 1024
# Entry calls: calls into production code made from outside it (a test calling the API). A
# few per function, for a bounded number of functions, in a byte budget of their own.
ENTRY_CALLS_PER_FUNCTION = 5
ENTRY_FUNCTIONS = 200
ENTRY_BYTES = 4 * 1024 * 1024
# Code objects whose calls cannot be replayed alone: generators, coroutines, async generators.
_NOT_REPLAYABLE = 0x20 | 0x80 | 0x100 | 0x200
_TOOL = 4  # sys.monitoring tool id (the last of the free ones: 0-5 are for tools)


@dataclass
class Target:
    """One function whose calls are captured: its file, qualname and first line there."""

    path: str
    qualname: str
    line: int = 0


@dataclass
class Captured:
    """One captured call."""

    function: str  # path::qualname
    test: str
    args: str  # base64 of the pickled (positional, keyword) arguments
    entry: bool = False  # a call into production code from outside it (not a changed function)


@dataclass
class Traced:
    """What a tracer gathered."""

    lines: dict[str, set[int]] = field(default_factory=dict)
    calls: list[Captured] = field(default_factory=list)
    # function -> calls not kept: "budget" (over the per-function or byte budget) or
    # "uncopyable" (arguments that cannot be pickled: an open file, a generator, a lock).
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)


class Tracer:
    """Trace the lines of some files and the calls of some functions in them."""

    def __init__(
        self,
        root: str,
        cover: list[str],
        capture: list[Target],
        current_test: Callable[[], str],
        on_call: Optional[Callable[[Captured], None]] = None,
        entries: tuple[list[str], list[str]] = ([], []),
    ) -> None:
        self.root = root
        self.files = {self._real(p): p for p in cover}
        # Production code whose entry calls are captured (path prefixes, and the prefixes
        # inside them that are not production: a test folder inside the package).
        self.entry_roots = tuple(self._real(p) for p in entries[0])
        self.entry_skip = tuple(self._real(p) for p in entries[1])
        self._entry_seen: dict[str, Optional[str]] = {}
        self._entry_bytes = 0
        self._entries: set[str] = set()
        self.wanted: dict[tuple[str, str], Target] = {}
        for target in capture:
            self.files.setdefault(self._real(target.path), target.path)
            self.wanted[(self._real(target.path), target.qualname)] = target
        self.current_test = current_test
        self.on_call = on_call
        self.traced = Traced()
        self._bytes = 0
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._mode = ""
        self._seen: dict[str, Optional[str]] = {}
        # Why nothing was traced, when that is so (another tracer already installed).
        self.unavailable = ""

    def _real(self, path: str) -> str:
        return os.path.realpath(os.path.join(self.root, path))

    # -- installing ---------------------------------------------------------------------------

    def start(self) -> None:
        if not self.files and not self.entry_roots:
            return
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None and monitoring.get_tool(_TOOL) is None:
            self._start_monitoring(monitoring)
        elif sys.gettrace() is not None:
            # coverage.py (pytest-cov) or a debugger holds sys.settrace: theirs is kept.
            self.unavailable = "another tracer (coverage.py, a debugger) holds sys.settrace"
        else:
            self._mode = "settrace"
            threading.settrace(self._global)
            sys.settrace(self._global)

    def stop(self) -> None:
        if self._mode == "settrace":
            if sys.gettrace() != self._global and not self.unavailable:
                # coverage.py (pytest-cov) or a debugger installed its own function after
                # ours: what ran after that is unknown, and unknown is never "not reached".
                self.unavailable = "another tracer (coverage.py, a debugger) replaced charpin's"
            sys.settrace(None)
            threading.settrace(None)
        elif self._mode == "monitoring":
            monitoring = getattr(sys, "monitoring")  # noqa: B009 (3.12+; vermin reads 3.9)
            monitoring.set_events(_TOOL, 0)
            monitoring.free_tool_id(_TOOL)
        self._mode = ""

    def _start_monitoring(self, monitoring: Any) -> None:
        self._mode = "monitoring"
        events = monitoring.events
        monitoring.use_tool_id(_TOOL, "charpin")
        disable = monitoring.DISABLE

        def started(code: Any, offset: int) -> Any:
            real = self._file_of(code)
            entry = self._entry_of(code.co_filename)
            if real is None and entry is None:
                return disable
            frame = sys._getframe(1)
            captured = False
            if real is not None:
                monitoring.set_local_events(_TOOL, code, events.LINE)
                captured = self._maybe_capture(code, frame, real)
            if entry is not None and not captured:
                self._maybe_entry(code, frame, entry)
            return None

        def line(code: Any, number: int) -> Any:
            real = self._file_of(code)
            if real is not None:
                self.traced.lines.setdefault(self.files[real], set()).add(number)
            return None

        monitoring.register_callback(_TOOL, events.PY_START, started)
        monitoring.register_callback(_TOOL, events.LINE, line)
        monitoring.set_events(_TOOL, events.PY_START)

    # -- sys.settrace -------------------------------------------------------------------------

    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        real = self._file_of(frame.f_code)
        entry = self._entry_of(frame.f_code.co_filename)
        captured = False
        if real is not None:
            captured = self._maybe_capture(frame.f_code, frame, real)
        if entry is not None and not captured:
            self._maybe_entry(frame.f_code, frame, entry)
        if real is None:
            return None
        lines = self.traced.lines.setdefault(self.files[real], set())
        lines.add(frame.f_lineno)

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line":
                lines.add(frame.f_lineno)
            return local

        return local

    # -- shared -------------------------------------------------------------------------------

    def _file_of(self, code: Any) -> Optional[str]:
        name = code.co_filename
        found = self._seen.get(name, "?")
        if found == "?":
            real = os.path.realpath(name) if name and not name.startswith("<") else ""
            found = real if real in self.files else None
            self._seen[name] = found
        return found

    def _entry_of(self, name: str) -> Optional[str]:
        """The repository path of a production file whose entry calls are captured, or None."""
        if not self.entry_roots:
            return None
        found = self._entry_seen.get(name, "?")
        if found == "?":
            found = None
            real = os.path.realpath(name) if name and not name.startswith("<") else ""
            if real.endswith(".py") and _under(real, self.entry_roots):
                if not _under(real, self.entry_skip):
                    found = os.path.relpath(real, os.path.realpath(self.root)).replace(os.sep, "/")
            self._entry_seen[name] = found
        return found

    def _maybe_entry(self, code: Any, frame: Any, path: str) -> None:
        """Capture a call into production code made from outside it (by a test, a fixture,
        pytest): the calls the base's tests make into the API, whatever the patch changed."""
        qualname = getattr(code, "co_qualname", code.co_name)
        if "<" in qualname or code.co_flags & _NOT_REPLAYABLE:
            return  # a module body, a lambda, a nested function or a generator: not replayable
        caller = frame.f_back
        if caller is not None and self._entry_of(caller.f_code.co_filename) is not None:
            return  # production calling production: only the way in is an entry
        function = f"{path}::{qualname}"
        with self._lock:
            count = self._counts.get(function, 0)
            if count == 0 and self._entry_functions() >= ENTRY_FUNCTIONS:
                self._drop(function, "budget")
                return
            self._counts[function] = count + 1
            if count >= ENTRY_CALLS_PER_FUNCTION or self._entry_bytes >= ENTRY_BYTES:
                self._drop(function, "budget")
                return
        try:
            data = pickle.dumps(_arguments(code, frame), protocol=4)
        except Exception:  # any object that will not pickle: the call is counted, not kept
            self._drop(function, "uncopyable")
            return
        if len(data) > CALL_BYTES:
            self._drop(function, "budget")
            return
        call = Captured(function, self.current_test(), base64.b64encode(data).decode("ascii"), True)
        with self._lock:
            self._entry_bytes += len(data)
            self._entries.add(function)
            self.traced.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)

    def _entry_functions(self) -> int:
        return len(self._entries)

    def _maybe_capture(self, code: Any, frame: Any, real: str) -> bool:
        """Capture a call into a changed function; True when the function is one."""
        qualname = getattr(code, "co_qualname", code.co_name)
        target = self.wanted.get((real, qualname))
        if target is None:
            return False
        function = f"{target.path}::{target.qualname}"
        with self._lock:
            count = self._counts.get(function, 0)
            self._counts[function] = count + 1
            if count >= CALLS_PER_FUNCTION or self._bytes >= TOTAL_BYTES:
                self._drop(function, "budget")
                return True
        try:
            data = pickle.dumps(_arguments(code, frame), protocol=4)
        except Exception:  # any object that will not pickle: the call is counted, not kept
            self._drop(function, "uncopyable")
            return True
        if len(data) > CALL_BYTES:
            self._drop(function, "budget")
            return True
        call = Captured(function, self.current_test(), base64.b64encode(data).decode("ascii"))
        with self._lock:
            self._bytes += len(data)
            self.traced.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)
        return True

    def _drop(self, function: str, why: str) -> None:
        counts = self.traced.dropped.setdefault(function, {})
        counts[why] = counts.get(why, 0) + 1


def _arguments(code: Any, frame: Any) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments as (positional, keyword), from the frame at its start."""
    names = code.co_varnames
    positional = code.co_argcount
    keyword_only = code.co_kwonlyargcount
    values = frame.f_locals
    args = [values[n] for n in names[:positional] if n in values]
    kwargs = {n: values[n] for n in names[positional : positional + keyword_only] if n in values}
    at = positional + keyword_only
    flags = code.co_flags
    if flags & 0x04:  # CO_VARARGS
        args += list(values.get(names[at], ()))
        at += 1
    if flags & 0x08:  # CO_VARKEYWORDS
        kwargs.update(values.get(names[at], {}))
    return args, kwargs


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)

"""The child-side bootstrap that records which env keys a Python target reads. Stdlib only.

BOOTSTRAP is written to the session's temp folder and run as `python BOOTSTRAP SCRIPT ARGS...`
(or `python BOOTSTRAP -m MODULE ARGS...`, run as `python -m MODULE` runs it, or
`python BOOTSTRAP --entry MODULE:ATTR NAME ARGS...`, a console script as its installed wrapper
runs it; tracebacks then leave out runpy's and the bootstrap's frames, which name files of the
interpreter that differ between boxes). `--argv0 NAME` first gives a script or module NAME as
sys.argv[0] (a case folder's argv.json[0]) instead of its path.
It wraps os.environ (and so os.getenv, `in`, .get) and os.environb in a recording subclass, runs
the script as __main__ with the sys.argv and sys.path[0] plain `python SCRIPT` would give, and
writes the sorted key set to the file named by CHARPIN_ENV_READS, a variable it removes before
the target starts. Output, exit codes and tracebacks stay as plain Python would make them.

Keys the standard library's locale machinery (gettext.py, locale.py) looks up on the program's
behalf are not recorded: gettext walks LANGUAGE, LC_ALL, LC_MESSAGES and LANG and stops at the
first one set, for every argparse, optparse or getopt message, so that list says which locale
variables happen to be set, not what the program depends on (C code such as setlocale() reads
them unseen anyway). Replay pins the locale (LANG=C.UTF-8), and the recording's LANG perturbation
checks that the program's bytes do not depend on it. A read is attributed to the first caller
outside os.py and _collections_abc.py (os.getenv, .get and `in` pass through those), so a program
that reads LANG itself still has it recorded.
"""

from __future__ import annotations

ENV_VAR = "CHARPIN_ENV_READS"
# The pins' pythonpath folders, for the bootstrap to put on sys.path once it has started.
PATH_VAR = "CHARPIN_PINS_PATH"
# verify's change coverage (#19): JSON {"out": FILE, "files": {real path: repository path}};
# the bootstrap records which lines of those files ran and writes them to FILE at exit.
TRACE_VAR = "CHARPIN_TRACE_LINES"

BOOTSTRAP = r"""
import os, sys
_out = os.environ.pop("CHARPIN_ENV_READS", None)
_pins_path = os.environ.pop("CHARPIN_PINS_PATH", None)
# What the modes below use, imported now, while the repository is not on sys.path: a file of
# the checkout named like one of them must not stand in for it.
import atexit
# "--argv0 NAME" may come first (see below): look past it for -m.
if sys.argv[1:2] == ["-m"] or (sys.argv[1:2] == ["--argv0"] and sys.argv[3:4] == ["-m"]):
    import runpy
_trace = os.environ.pop("CHARPIN_TRACE_LINES", None)
if _trace is not None:
    import json as _json
    import threading as _threading

    def _start_lines(spec):
        files, lines, seen = spec["files"], {}, {}

        def wanted(name):
            if name not in seen:
                real = os.path.realpath(name) if name and not name.startswith("<") else ""
                seen[name] = files.get(real)
            return seen[name]

        def write():
            try:
                with open(spec["out"], "w", encoding="utf-8") as handle:
                    _json.dump({k: sorted(v) for k, v in lines.items()}, handle)
            except OSError:
                pass

        # Registered first, so it runs last: lines other exit handlers run count too.
        atexit.register(write)
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None and monitoring.get_tool(4) is None:
            events = monitoring.events
            monitoring.use_tool_id(4, "charpin")

            def started(code, offset):
                if wanted(code.co_filename) is None:
                    return monitoring.DISABLE
                monitoring.set_local_events(4, code, events.LINE)

            def line(code, number):
                rel = wanted(code.co_filename)
                if rel is not None:
                    lines.setdefault(rel, set()).add(number)

            monitoring.register_callback(4, events.PY_START, started)
            monitoring.register_callback(4, events.LINE, line)
            monitoring.set_events(4, events.PY_START)
            return

        def called(frame, event, arg):
            rel = wanted(frame.f_code.co_filename)
            if event != "call" or rel is None:
                return None
            mine = lines.setdefault(rel, set())
            mine.add(frame.f_lineno)

            def local(frame, event, arg):
                if event == "line":
                    mine.add(frame.f_lineno)
                return local

            return local

        _threading.settrace(called)
        sys.settrace(called)

    _start_lines(_json.loads(_trace))
if _pins_path is not None:
    # The pins' pythonpath, where PYTHONPATH would put it, but only now: at interpreter start
    # nothing of the checkout ran (no sitecustomize.py of its folders). Children get it too.
    _given = os.environ.get("PYTHONPATH")
    _dirs = [d for d in _pins_path.split(os.pathsep) if d]
    sys.path[1:1] = _dirs
    os.environ["PYTHONPATH"] = os.pathsep.join(_dirs + ([_given] if _given else []))
_argv0 = None
if sys.argv[1:2] == ["--argv0"]:
    _argv0 = sys.argv[2]
    del sys.argv[1:3]
_reads = set()
_Env = type(os.environ)
_LIB = os.path.dirname(getattr(os, "__file__", None) or "")
_LOCALE_CODE = frozenset(
    path
    for name in ("gettext.py", "locale.py")
    for path in {os.path.join(_LIB, name), os.path.realpath(os.path.join(_LIB, name))}
) if _LIB else frozenset()
_PLUMBING = tuple(
    vars(module) for module in (os, sys.modules.get("_collections_abc")) if module is not None
)


def _by_locale_machinery(frame):
    # Skip os.getenv, Mapping.get and Mapping.__contains__ to the code that asked.
    while frame is not None and any(frame.f_globals is g for g in _PLUMBING):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename in _LOCALE_CODE


class _Recording(_Env):
    def __getitem__(self, key):
        if not _by_locale_machinery(sys._getframe(1)):
            name = key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else key
            _reads.add(str(name))
        return _Env.__getitem__(self, key)


os.environ.__class__ = _Recording
if getattr(os, "environb", None) is not None:
    os.environb.__class__ = _Recording


def _flush():
    if _out is None:
        return
    try:
        with open(_out, "w", encoding="utf-8") as handle:
            handle.write("\n".join(sorted(_reads)))
    except OSError:
        pass


def _main():
    # No runpy: it pulls in pkgutil, typing and re, which would double a small CLI's start-up.
    script = sys.argv[1]
    del sys.argv[0]
    if _argv0 is not None:
        sys.argv[0] = _argv0
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    atexit.register(_flush)
    with open(script, "rb") as handle:
        source = handle.read()
    module = type(sys)("__main__")
    module.__file__ = script
    module.__cached__ = None
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    try:
        exec(compile(source, script, "exec", dont_inherit=True), module.__dict__)
    except SystemExit:
        raise
    except BaseException:
        etype, value, tb = sys.exc_info()
        # Drop the bootstrap's own frame so the traceback starts in the target.
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        tb = _without_ours(tb)
        if value is not None:
            value = value.with_traceback(tb)
        sys.excepthook(etype, value, tb)
        sys.exit(1)


def _without_ours(tb):
    # This file's frames inside the target's traceback (os.environ[...] runs our __getitem__)
    # name a temporary path that differs on every replay: unlink them from the chain.
    own = _without_ours.__code__.co_filename
    kept = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != own:
            kept.append(tb)
        tb = tb.tb_next
    for before, after in zip(kept, kept[1:]):
        before.tb_next = after
    if kept:
        kept[-1].tb_next = None
    return kept[0] if kept else None


def _fresh_main():
    module = type(sys)("__main__")
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module


def _crash(skip):
    # The traceback plain Python prints, from the first frame that is neither ours nor skipped.
    etype, value, tb = sys.exc_info()
    own = _crash.__code__.co_filename
    while tb is not None and (
        tb.tb_frame.f_code.co_filename == own or skip(tb.tb_frame.f_code.co_filename)
    ):
        tb = tb.tb_next
    tb = _without_ours(tb)
    if value is not None:
        value = value.with_traceback(tb)
    sys.excepthook(etype, value, tb)
    sys.exit(1)


def _run_module():
    # `python -m MODULE ARGS...`: sys.argv[0] and sys.path[0] as Python sets them for -m.
    name = sys.argv[2]
    sys.argv[:] = ["-m" if _argv0 is None else _argv0] + sys.argv[3:]
    sys.path[0] = os.getcwd()
    atexit.register(_flush)
    _fresh_main()
    runpy_file = getattr(runpy, "__file__", None) or "runpy.py"
    try:
        run = getattr(runpy, "_run_module_as_main", None)
        if run is not None:
            # alter_argv=False still finds MODULE as -m does, but leaves sys.argv[0] as given.
            run(name, _argv0 is None)
        else:
            runpy.run_module(name, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        # A missing module is reported as "<sys.executable>: No module named ..."; where the
        # interpreter lives is not part of the program's output.
        prefix = sys.executable + ": "
        if isinstance(exc.code, str) and exc.code.startswith(prefix):
            raise SystemExit("python: " + exc.code[len(prefix):]) from None
        raise
    except BaseException:
        _crash(lambda name: name == runpy_file or name.startswith("<frozen runpy"))


def _run_entry():
    # A console script as its installed wrapper runs it: sys.exit(ATTR()), argv[0] its name.
    target, name = sys.argv[2], sys.argv[3]
    sys.argv[:] = [name] + sys.argv[4:]
    del sys.path[0]  # the wrapper's own folder (bin/) holds no modules
    atexit.register(_flush)
    _fresh_main()
    module_name, _, attrs = target.partition(":")
    try:
        __import__(module_name)
        call = sys.modules[module_name]
        for attr in attrs.split("."):
            call = getattr(call, attr)
        sys.exit(call())
    except SystemExit:
        raise
    except BaseException:
        _crash(lambda name: False)


if sys.argv[1:2] == ["-m"]:
    _run_module()
elif sys.argv[1:2] == ["--entry"]:
    _run_entry()
else:
    _main()
"""

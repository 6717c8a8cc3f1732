"""The child-side bootstrap that records which env keys a Python target reads. Stdlib only.

BOOTSTRAP is written to the session's temp folder and run as `python BOOTSTRAP SCRIPT ARGS...`.
It wraps os.environ (and so os.getenv, `in`, .get) and os.environb in a recording subclass, runs
the script as __main__ with the sys.argv and sys.path[0] plain `python SCRIPT` would give, and
writes the sorted key set to the file named by CHARPIN_ENV_READS, a variable it removes before
the target starts. Output, exit codes and tracebacks stay as plain Python would make them.
"""

from __future__ import annotations

ENV_VAR = "CHARPIN_ENV_READS"

BOOTSTRAP = r"""
import os, sys
_out = os.environ.pop("CHARPIN_ENV_READS", None)
_reads = set()
_Env = type(os.environ)


class _Recording(_Env):
    def __getitem__(self, key):
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
    import atexit
    script = sys.argv[1]
    del sys.argv[0]
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
        if value is not None:
            value = value.with_traceback(tb)
        sys.excepthook(etype, value, tb)
        sys.exit(1)


_main()
"""

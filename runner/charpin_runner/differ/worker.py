"""The replay worker: calls one function of one checkout with captured or generated arguments and
prints what each call did, canonically. Runs on boxes, inside the sandbox, in the project's own
interpreter; stdlib only.

WORKER is written to a folder of the run and started as `python WORKER` with the checkout as
its working folder; a job (JSON) comes on stdin. Before the module under test is imported it
applies the job's perturbation (a clock frozen at a given time; the hash seed is the parent's
PYTHONHASHSEED) and seeds `random`, so that base and patched see the same world. For each call it
prints one JSON line: the result, or the exception's type and message; what the call did to its
own arguments; what it printed; the files it wrote in its working folder (a fresh one per call).
Values are written in one canonical form (sorted mappings and sets, memory addresses removed),
so the two versions' lines compare as text.
"""

from __future__ import annotations

WORKER = r'''
import base64, contextlib, hashlib, io, json, os, pickle, random, re, shutil, signal, sys, tempfile
from time import monotonic as time_monotonic
job = json.loads(sys.stdin.read())
for folder in reversed(job["paths"]):
    sys.path.insert(0, folder)

clock = job.get("clock")
if clock is not None:
    # Frozen before the module under test is imported: a `from datetime import datetime`
    # there gets the frozen class.
    import datetime as _dt, time as _time
    _time.time = lambda: float(clock)
    _time.time_ns = lambda: int(clock * 1_000_000_000)
    _localtime, _gmtime, _strftime = _time.localtime, _time.gmtime, _time.strftime
    _time.localtime = lambda secs=None: _localtime(clock if secs is None else secs)
    _time.gmtime = lambda secs=None: _gmtime(clock if secs is None else secs)
    _time.strftime = lambda fmt, t=None: _strftime(fmt, _localtime(clock) if t is None else t)

    class _Frozen(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls.fromtimestamp(clock, tz)

        @classmethod
        def utcnow(cls):
            return cls.utcfromtimestamp(clock)

        @classmethod
        def today(cls):
            return cls.fromtimestamp(clock)

    class _FrozenDate(_dt.date):
        @classmethod
        def today(cls):
            return cls.fromtimestamp(clock)

    _dt.datetime = _Frozen
    _dt.date = _FrozenDate

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
LIMIT = 200_000


def canon(value, depth=0, seen=None):
    """value as JSON-able data, the same for equal values in any process."""
    if depth > 8:
        return {"<deep>": type(value).__name__}
    seen = set() if seen is None else seen
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).hex()}
    if id(value) in seen:
        return {"<cycle>": type(value).__name__}
    seen = seen | {id(value)}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [canon(v, depth + 1, seen) for v in value]}
    if isinstance(value, dict):
        items = [[canon(k, depth + 1, seen), canon(v, depth + 1, seen)] for k, v in value.items()]
        return {"dict": sorted(items, key=lambda kv: json.dumps(kv[0], sort_keys=True))}
    if isinstance(value, (set, frozenset)):
        items = [canon(v, depth + 1, seen) for v in value]
        return {type(value).__name__: sorted(items, key=lambda v: json.dumps(v, sort_keys=True))}
    kind = type(value)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if hasattr(value, "__next__") or hasattr(value, "send") or hasattr(value, "fileno"):
        raise TypeError(f"a {name} (an iterator, generator or open file) cannot be compared")
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and not callable(value):
        return {name: canon(state, depth + 1, seen)}
    slots = getattr(kind, "__slots__", None)
    if slots:
        names = [slots] if isinstance(slots, str) else list(slots)
        return {name: {s: canon(getattr(value, s, None), depth + 1, seen) for s in names}}
    return {name: ADDRESS.sub(" at 0x?", repr(value))}


def text(value):
    out = json.dumps(canon(value), sort_keys=True, ensure_ascii=False)
    return out if len(out) <= LIMIT else out[:LIMIT] + "...(cut)"


def load(function):
    path, qualname = function.split("::", 1)
    root = os.getcwd()
    module = None
    stem = path[:-3] if path.endswith(".py") else path
    for base in job["paths"]:
        rel = os.path.relpath(os.path.join(root, stem), base)
        if rel.startswith(".."):
            continue
        name = rel.replace(os.sep, ".")
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        try:
            import importlib
            module = importlib.import_module(name)
            break
        except Exception:
            module = None
    if module is None:
        import importlib.util
        spec = importlib.util.spec_from_file_location("_charpin_target", os.path.join(root, path))
        module = importlib.util.module_from_spec(spec)
        sys.modules["_charpin_target"] = module
        spec.loader.exec_module(module)
    target = module
    for part in qualname.split("."):
        if part == "<locals>":
            raise LookupError("a nested function cannot be called on its own")
        target = getattr(target, part)
    return target


def timed_out(signum, frame):
    raise TimeoutError("the call ran past its time budget")


channel = os.fdopen(job["fd"], "w", buffering=1)


def say(**fields):
    channel.write(json.dumps(fields, sort_keys=True) + "\n")


def shown(name, args, kwargs):
    import reprlib
    short = reprlib.Repr()
    short.maxstring, short.maxother, short.maxlist, short.maxdict = 60, 60, 6, 6
    words = [short.repr(a) for a in args] + [f"{k}={short.repr(v)}" for k, v in kwargs.items()]
    out = f"{name}({', '.join(words)})"
    return ADDRESS.sub(" at 0x?", out if len(out) <= 200 else out[:200] + "...)")


def run_one(function, call, name):
    try:
        args, kwargs = pickle.loads(base64.b64decode(call["args"]))
        before = text([args, kwargs])
        call_text = shown(name, args, kwargs)
    except BaseException as exc:
        say(id=call["id"], skip=f"the arguments do not load here ({type(exc).__name__}: {exc})")
        return
    perform(call["id"], function, args, kwargs, before, call_text)


def perform(call_id, function, args, kwargs, before, call_text, extra=None):
    """Call function(*args, **kwargs) in a fresh folder and say what it did (with what extra(),
    the caller's, adds once the call is over)."""
    here = tempfile.mkdtemp(prefix="charpin-call-")
    os.chdir(here)
    out, err = io.StringIO(), io.StringIO()
    random.seed(job.get("seed", 0))
    result = error = uncomparable = None
    began = time_monotonic()
    signal.setitimer(signal.ITIMER_REAL, float(job.get("seconds", 10)))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            value = function(*args, **kwargs)
    except TimeoutError as exc:
        error = f"TimeoutError: {exc}"
    except BaseException as exc:
        error = f"{type(exc).__name__}: {ADDRESS.sub(' at 0x?', str(exc))}"[:2000]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    took = time_monotonic() - began
    shown_result = None
    if error is None:
        try:
            result = text(value)
        except Exception as exc:
            uncomparable = str(exc)
        try:
            shown_result = shown("", [value], {})[1:-1]
        except Exception:
            shown_result = None
    try:
        after = text([args, kwargs])
    except BaseException:
        after = before
    files = {}
    for folder, _dirs, names in os.walk(here):
        for name in names:
            full = os.path.join(folder, name)
            with open(full, "rb") as handle:
                files[os.path.relpath(full, here)] = hashlib.sha256(handle.read()).hexdigest()
    os.chdir(job["root"])
    shutil.rmtree(here, ignore_errors=True)
    say(
        id=call_id,
        call=call_text,
        shown=shown_result,
        result=result,
        error=error,
        uncomparable=uncomparable,
        mutated=None if after == before else after,
        stdout=out.getvalue()[-4000:],
        stderr=err.getvalue()[-4000:],
        files=files,
        took=round(took, 6),
        **(extra() if extra is not None else {}),
    )


signal.signal(signal.SIGALRM, timed_out)
for name, calls in job["functions"]:
    try:
        function = load(name)
    except BaseException as exc:
        say(function=name, load_error=f"{type(exc).__name__}: {exc}")
        continue
    for call in calls:
        run_one(function, call, name.split("::", 1)[1])
'''

"""The generated-input part of the replay worker: it serves requests instead of one batch. Runs
on boxes, inside the sandbox, in the project's own interpreter; stdlib only.

SERVE is appended to worker.WORKER (which it uses: `load`, `perform`, `shown`, `text`, `say`).
With `"serve": true` in the job the worker reads one JSON request a line from the job's
`requests` descriptor (stdin stays the job's, at its end, so code that reads stdin reads nothing)
and answers on the channel:

* `describe FUNCTION CALLS`: what the function takes, for the generator (differ/strategies.py):
  each parameter's kind, default and annotation as a schema (int, float, str, bool, bytes, None,
  list/set/frozenset/tuple/dict of those, Optional, Union, Literal, Enum, dataclasses of
  those); the captured calls' arguments as value trees (an argument that is no such value
  stays the captured object, named by call and position); the constants the function's code
  compares with (its own, its module's, and those of the same module's functions it calls).
* `call FUNCTION ID INPUT`: builds the input's value trees into objects and calls the function
  as worker.perform does (fresh folder, seeded random, per-call time limit, canonical answer).

Base, base again and patched get the same requests in the same order, the describes included,
so whatever a describe does to module state (a class constructed, an argument unpickled)
happens on all three.
"""

from __future__ import annotations

SERVE = r'''
import collections.abc as _abc, dataclasses, enum, inspect, math, typing, types as _types

NOPE = object()
DEPTH = 4
TREE_LIMIT = 20_000
_UNION = getattr(_types, "UnionType", None)
_SEQUENCES = (list, _abc.Sequence, _abc.MutableSequence, _abc.Iterable, _abc.Collection)
_SETS = (set, _abc.Set, _abc.MutableSet)
_MAPPINGS = (dict, _abc.Mapping, _abc.MutableMapping)
_ANY = {"t": "any"}
enums = {}


def class_path(kind):
    return f"{kind.__module__}:{kind.__qualname__}"


def find_class(path):
    import importlib
    module_name, _, qualname = path.partition(":")
    target = sys.modules.get(module_name) or importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _enum(kind):
    path = class_path(kind)
    enums[path] = [m.name for m in kind]
    return path


def schema(tp, depth=0):
    """An annotation as a schema the generator reads ({"t": "any"}: nothing known)."""
    if depth > DEPTH or tp is inspect.Parameter.empty or tp is typing.Any or tp is object:
        return _ANY
    if tp is None or tp is type(None):
        return {"t": "none"}
    if isinstance(tp, str):
        return _ANY
    if hasattr(tp, "__supertype__"):  # NewType
        return schema(tp.__supertype__, depth + 1)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or (_UNION is not None and origin is _UNION):
        return {"t": "union", "of": [schema(a, depth + 1) for a in args]}
    if origin is typing.Literal:
        values = [describe(a) for a in args]
        return {"t": "literal", "values": [v for v in values if v is not NOPE]}
    if origin is not None and hasattr(tp, "__metadata__"):  # Annotated[X, ...]
        return schema(args[0], depth + 1) if args else _ANY
    of = [schema(a, depth + 1) for a in args if a is not Ellipsis]
    if origin is tuple or tp is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"t": "tuple", "of": of[0]}
        if args == ((),):
            return {"t": "tuple", "items": []}
        return {"t": "tuple", "items": of} if args else {"t": "tuple", "of": _ANY}
    if origin in _SEQUENCES or tp is list:
        return {"t": "list", "of": of[0] if of else _ANY}
    if origin is frozenset or tp is frozenset:
        return {"t": "frozenset", "of": of[0] if of else _ANY}
    if origin in _SETS or tp is set:
        return {"t": "set", "of": of[0] if of else _ANY}
    if origin in _MAPPINGS or tp is dict:
        return {"t": "dict", "k": of[0] if of else _ANY, "v": of[1] if len(of) > 1 else _ANY}
    if tp in (int, float, str, bool, bytes):
        return {"t": tp.__name__}
    if isinstance(tp, type) and issubclass(tp, enum.Enum) and len(tp):
        return {"t": "enum", "cls": _enum(tp), "members": enums[class_path(tp)]}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        try:
            hints = typing.get_type_hints(tp)
        except Exception:
            hints = {}
        fields = []
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            has_default = (
                f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            )
            fields.append([f.name, schema(hints.get(f.name, f.type), depth + 1), has_default])
        return {"t": "dataclass", "cls": class_path(tp), "fields": fields}
    return {"t": "opaque", "name": repr(tp)[:80]}


def describe(value, depth=0):
    """value as a value tree (JSON), or NOPE when it is no plain value."""
    if depth > DEPTH:
        return NOPE
    if isinstance(value, enum.Enum):
        return {"enum": _enum(type(value)), "name": value.name}
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return {"float": repr(value)}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind in (list, tuple, set, frozenset):
        items = [describe(v, depth + 1) for v in value]
        if any(i is NOPE for i in items):
            return NOPE
        if kind in (set, frozenset):
            items.sort(key=lambda i: json.dumps(i, sort_keys=True))
        return {kind.__name__: items}
    if kind is dict:
        pairs = [[describe(k, depth + 1), describe(v, depth + 1)] for k, v in value.items()]
        return NOPE if any(x is NOPE for p in pairs for x in p) else {"dict": pairs}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {}
        for f in dataclasses.fields(value):
            if f.init:
                fields[f.name] = describe(getattr(value, f.name, None), depth + 1)
        if any(v is NOPE for v in fields.values()):
            return NOPE
        return {"dataclass": class_path(kind), "fields": fields}
    return NOPE


seen_calls = {}


def seen_value(function, index, position):
    args, kwargs = pickle.loads(base64.b64decode(seen_calls[function][index]))
    return args[position] if isinstance(position, int) else kwargs[position]


def build(tree, function):
    """A value tree (describe's form, or the generator's) as the object it stands for."""
    if tree is None or isinstance(tree, (bool, int, str)):
        return tree
    if "float" in tree:
        return float(tree["float"])
    if "bytes" in tree:
        return bytes.fromhex(tree["bytes"])
    for tag, make in (("list", list), ("tuple", tuple), ("set", set), ("frozenset", frozenset)):
        if tag in tree:
            return make(build(v, function) for v in tree[tag])
    if "dict" in tree:
        return {build(k, function): build(v, function) for k, v in tree["dict"]}
    if "enum" in tree:
        return find_class(tree["enum"])[tree["name"]]
    if "dataclass" in tree:
        fields = {k: build(v, function) for k, v in tree["fields"].items()}
        return find_class(tree["dataclass"])(**fields)
    if "new" in tree:
        return find_class(tree["new"])()
    if "seen" in tree:
        return seen_value(function, tree["seen"][0], tree["seen"][1])
    raise ValueError(f"not a value tree: {sorted(tree)}")


def gather(function, found, owner=None, depth=0):
    """The literals function's code holds, and the constants and the functions of its module
    (or of its class) that it names, one call deep."""
    target = inspect.unwrap(function)
    target = getattr(target, "__func__", target)
    code = getattr(target, "__code__", None)
    if code is None:
        return
    names = getattr(target, "__globals__", {})
    stack = [code]
    while stack:
        here = stack.pop()
        values = list(here.co_consts)
        for name in here.co_names:
            value = names.get(name, NOPE)
            if value is NOPE and owner is not None:
                value = owner.__dict__.get(name, NOPE)
                value = getattr(value, "__func__", value)
            if inspect.isfunction(value):
                if depth < 1 and value.__module__ == target.__module__:
                    gather(value, found, owner, depth + 1)
            elif type(value) in (int, float, str, bytes):
                values.append(value)
        for value in values:
            if isinstance(value, type(code)):
                stack.append(value)
            elif type(value) is int and abs(value) < 2**64:
                found["int"].add(value)
            elif type(value) is float and math.isfinite(value):
                found["float"].add(value)
            elif type(value) is str and len(value) <= 40:
                found["str"].add(value)
            elif type(value) is bytes and len(value) <= 40:
                found["bytes"].add(value.hex())


def _tree(value, call, position):
    tree = describe(value)
    if tree is NOPE or len(json.dumps(tree)) > TREE_LIMIT:
        return {"seen": [call, position]}
    return tree


def describe_function(name, calls):
    seen_calls[name] = list(calls)
    function = load(name)
    path, qualname = name.split("::", 1)
    parts = qualname.split(".")
    kind = "function"
    owner = None
    if len(parts) > 1:
        owner = load(f"{path}::{'.'.join(parts[:-1])}")
        if not isinstance(owner, type):
            return {"skip": "it is not a module function or a method of a class"}
        raw = inspect.getattr_static(owner, parts[-1])
        if isinstance(raw, staticmethod):
            kind = "static"
        elif isinstance(raw, classmethod):
            kind = "classmethod"
        elif inspect.isfunction(raw):
            kind = "method"
        else:
            return {"skip": f"it is a {type(raw).__name__}, not a function"}
    if not callable(function):
        return {"skip": "it is not callable"}
    plain = inspect.unwrap(function)
    if any(
        check(function) or check(plain)
        for check in (
            inspect.isgeneratorfunction, inspect.iscoroutinefunction, inspect.isasyncgenfunction
        )
    ):
        return {"skip": "it returns a generator or a coroutine, which cannot be compared"}
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        return {"skip": f"its signature cannot be read ({exc})"}
    try:
        hints = typing.get_type_hints(function)
    except Exception:
        hints = {}
        for pname, note in getattr(plain, "__annotations__", {}).items():
            try:
                hints[pname] = eval(note, getattr(plain, "__globals__", {})) if isinstance(
                    note, str
                ) else note
            except Exception:
                pass
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "pos",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "pos",
        inspect.Parameter.KEYWORD_ONLY: "kw",
        inspect.Parameter.VAR_POSITIONAL: "var",
        inspect.Parameter.VAR_KEYWORD: "varkw",
    }
    params = []
    for index, p in enumerate(signature.parameters.values()):
        if kind == "method" and index == 0:
            continue
        params.append({
            "name": p.name,
            "kind": kinds[p.kind],
            "keyword": p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD,
            "default": p.default is not inspect.Parameter.empty,
            "schema": schema(hints.get(p.name, p.annotation)),
        })
    itself = None
    if kind == "method":
        try:
            owner()
            itself = {"new": class_path(owner)}
        except Exception:
            itself = None
    seen = []
    for index, data in enumerate(calls):
        try:
            args, kwargs = pickle.loads(base64.b64decode(data))
        except Exception:
            continue
        skip = 1 if kind == "classmethod" else 0  # the frame's cls, which the bound method has
        seen.append({
            "args": [_tree(a, index, i) for i, a in enumerate(args) if i >= skip],
            "kwargs": {k: _tree(v, index, k) for k, v in kwargs.items()},
        })
    found = {"int": set(), "float": set(), "str": set(), "bytes": set()}
    gather(function, found, owner if isinstance(owner, type) else None)
    constants = {
        "int": sorted(found["int"])[:40],
        "float": [repr(f) for f in sorted(found["float"])[:40]],
        "str": sorted(found["str"])[:40],
        "bytes": sorted(found["bytes"])[:20],
    }
    return {
        "kind": kind,
        "params": params,
        "self": itself,
        "seen": seen,
        "constants": constants,
        "enums": dict(enums),
    }


def shown_call(name, tree, args, kwargs):
    qualname = name.split("::", 1)[1]
    first = tree["args"][0] if tree["args"] else None
    if isinstance(first, dict) and "new" in first and "." in qualname:
        owner, _, method = qualname.rpartition(".")
        return shown(f"{owner}().{method}", args[1:], kwargs)
    return shown(qualname, args, kwargs)


loaded = {}


def serve_call(request):
    name = request["function"]
    if name not in loaded:
        try:
            loaded[name] = load(name)
        except BaseException as exc:
            loaded[name] = exc
    function = loaded[name]
    if isinstance(function, BaseException):
        say(id=request["id"], load_error=f"{type(function).__name__}: {function}")
        return
    tree = request["input"]
    try:
        args = [build(t, name) for t in tree["args"]]
        kwargs = {k: build(v, name) for k, v in tree["kwargs"].items()}
        before = text([args, kwargs])
        call_text = shown_call(name, tree, args, kwargs)
    except BaseException as exc:
        say(id=request["id"], skip=f"the input does not build here ({type(exc).__name__}: {exc})")
        return
    if not covered:
        perform(request["id"], function, args, kwargs, before, call_text)
        return
    lines = {}

    def local(frame, event, arg):
        if event == "line":
            lines.setdefault(covered[frame.f_code.co_filename], set()).add(frame.f_lineno)
        return local

    def started(frame, event, arg):
        name = frame.f_code.co_filename
        if name not in covered:
            return None
        lines.setdefault(covered[name], set()).add(frame.f_lineno)
        return local

    def ran():
        sys.settrace(None)
        return {"lines": {path: sorted(numbers) for path, numbers in lines.items()}}

    sys.settrace(started)
    try:
        perform(request["id"], function, args, kwargs, before, call_text, ran)
    finally:
        sys.settrace(None)


def _covered():
    """co_filename -> the changed file's path in the tree, for the files the job traces."""
    found = {}
    for rel in job.get("cover", []):
        full = os.path.join(job["root"], rel)
        found[full] = rel
        found[os.path.realpath(full)] = rel
    return found


covered = _covered()


if job.get("serve"):
    sys.stdin = open(os.devnull)
    requests = os.fdopen(job["requests"], "r", encoding="utf-8")
    for line in requests:
        request = json.loads(line)
        if request.get("op") == "describe":
            try:
                said = describe_function(request["function"], request.get("calls", []))
            except BaseException as exc:
                said = {"load_error": f"{type(exc).__name__}: {exc}"[:2000]}
            os.chdir(job["root"])
            say(id=request["id"], described=said)
        elif request.get("op") == "call":
            serve_call(request)
        else:
            break
'''

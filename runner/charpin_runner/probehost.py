"""Start the tests' pytest with charpin's probe loaded before anything of the checkout. Runs on
boxes; stdlib only.

Rule 1 of the threat model: charpin's own code never imports from the checkout. `python -m
pytest` puts its working folder (the checkout) first on sys.path, so a checkout that ships
`pytest.py`, `charpin_runner/plugin.pyc`, a `*.dist-info` with a `pytest11` entry point or a
`sitecustomize.py` on PYTHONPATH would run before the probe, or be the probe. So the test command
is rewritten: where it says `-m pytest`, or names a pytest script, the same interpreter runs a
boot script kept in a private folder outside the checkout (the probe root). The boot

1. imports the probe and pytest while sys.path holds only the probe root and the interpreter's
   own environment (PYTHONPATH is handed over in CHARPIN_BOOT_PYTHONPATH, so nothing from it is
   imported at start-up: no sitecustomize.py of a checkout folder);
2. then puts back what the command would have had: its working folder (for `-m pytest`) and the
   PYTHONPATH folders, after the probe root, and PYTHONPATH in the environment for the tests'
   own subprocesses;
3. runs pytest with the probe registered as a plugin object, before any `-p` of the checkout's
   configuration, with `*.dist-info` folders inside the checkout hidden from pytest's plugin
   autoload (the interpreter's own site folders stay visible, an in-tree `.venv` included).

Any other test command cannot get these guarantees and is refused (fail closed).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import charpin_runner
from charpin_runner.errors import ConfigError

BOOT_NAME = "charpin_pytest_boot.py"
WORKER_BOOT_NAME = "charpin_xdist_worker_boot.py"
PYTHONPATH_VAR = "CHARPIN_BOOT_PYTHONPATH"
# The parent's record pipe as `DEV:INO` (os.fstat of its write end): the boot checks that the
# descriptor it was handed is that pipe before it takes it over (inpytest/channel.py).
IDENTITY_VAR = "CHARPIN_RECORD_IDENTITY"
# What the boot exits with when the interpreter already held charpin's modules before it ran:
# something on the interpreter's start-up path (a .pth file) imported them, and the probe would
# be theirs. pytest's own "internal error" status, so the parent never reads it as a verdict.
TRIPWIRE_STATUS = 3
_PYTEST_SCRIPTS = re.compile(r"(py\.test|pytest)(-?\d+(\.\d+)*)?")
# pip writes this when the interpreter's path cannot be a shebang (too long, spaces).
_SH_EXEC = re.compile(rb"^'''exec' \"?([^\"\n]+?)\"? \"\$0\" \"\$@\"", re.MULTILINE)
_SHEBANG_BYTES = 1024

BOOT = r'''
import os, sys
_ROOT, _EXTRA, _PACKAGE, _PATH0, _ARGV0 = %(args)r
_pythonpath = os.environ.pop(%(pythonpath_var)r, None)
_expected = os.environ.pop(%(identity_var)r, None)
if any(name == "charpin_runner" or name.startswith("charpin_runner.") for name in sys.modules):
    sys.stderr.write("charpin: the interpreter imported charpin_runner before the probe could "
                     "load (a .pth file or sitecustomize on its start-up path); refusing\n")
    sys.exit(%(tripwire)d)
sys.path[0:1] = [_ROOT] + _EXTRA
try:
    import pytest
except ImportError as _missing:
    sys.stderr.write("charpin: %%s cannot import pytest (%%s): install it there (%%s -m pip "
                     "install pytest), add setup = [\"pip install pytest\"] to [tool.charpin], "
                     "or name another python for the box\n" %% (sys.executable, _missing,
                                                                sys.executable))
    sys.exit(%(tripwire)d)
import charpin_runner.plugin as _probe
if os.path.realpath(os.path.dirname(_probe.__file__)) != _PACKAGE:
    sys.stderr.write("charpin: the probe loaded from %%s, not from charpin's own package; "
                     "refusing\n" %% _probe.__file__)
    sys.exit(%(tripwire)d)
_probe.preload()
from charpin_runner.inpytest import boot as _boot, channel as _channel
_refused = _channel.adopt(sys.argv, _expected)
if _refused:
    sys.stderr.write("charpin: %%s; refusing\n" %% _refused)
    sys.exit(%(tripwire)d)
_boot.preload()
import pytest
_where = 1 + len(_EXTRA)
if _PATH0:
    sys.path.insert(_where, os.getcwd())
    _where += 1
if _pythonpath is not None:
    os.environ["PYTHONPATH"] = _pythonpath
    sys.path[_where:_where] = [p for p in _pythonpath.split(os.pathsep) if p]
_boot.settle(os.getcwd())
_boot.follow_sys_path()
_boot.guard_autoload()
sys.argv[0] = _ARGV0 or os.path.join(os.path.dirname(pytest.__file__), "__main__.py")
_workers = _boot.BootPlugin(os.path.join(_ROOT, %(worker_boot)r))
try:
    _code = pytest.main(sys.argv[1:], plugins=[_probe, _workers])
    sys.stdout.flush()
except BrokenPipeError:
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    _code = 1
raise SystemExit(_code)
'''

# Each pytest-xdist worker: started by the controller's execnet as `PYTHON THIS -u -c BOOTSTRAP`
# (boot.BootPlugin), in the checkout, with PYTHONPATH moved aside; the same preload as the
# controller, then xdist's bootstrap as `python -c` would have run it.
WORKER_BOOT = r'''
import os, sys
_ROOT, _EXTRA, _PACKAGE = %(args)r
_pythonpath = os.environ.pop(%(pythonpath_var)r, None)
if any(name == "charpin_runner" or name.startswith("charpin_runner.") for name in sys.modules):
    sys.stderr.write("charpin: the worker's interpreter imported charpin_runner before its "
                     "boot; refusing\n")
    sys.exit(%(tripwire)d)
sys.path[0:1] = [_ROOT] + _EXTRA
from charpin_runner.inpytest import boot as _boot
if os.path.realpath(os.path.dirname(os.path.dirname(_boot.__file__))) != _PACKAGE:
    sys.stderr.write("charpin: the worker's boot loaded from %%s; refusing\n" %% _boot.__file__)
    sys.exit(%(tripwire)d)
import charpin_runner.plugin as _probe
_probe.preload()
_boot.preload()
import xdist.remote
if _pythonpath is not None:
    os.environ["PYTHONPATH"] = _pythonpath
_boot.settle(os.getcwd())
_boot.guard_autoload()
_code = _boot.worker_code(sys.argv[1:])
for _name in ("__file__", "__cached__", "_ROOT", "_EXTRA", "_PACKAGE", "_pythonpath", "_boot",
              "_probe", "_name"):
    globals().pop(_name, None)
exec(compile(_code, "<string>", "exec"))
'''


def make_root(parent: Optional[Path] = None) -> tuple[Path, list[str], str]:
    """A new probe root folder: (folder, extra sys.path entries, the package's real path).

    From a zipapp the package is imported from the .pyz itself (an extra entry); from a folder
    it is linked into the probe root, because its parent may be a whole site-packages that must
    not shadow the packages of the project under test."""
    package = Path(charpin_runner.__file__).resolve().parent
    folder = Path(tempfile.mkdtemp(prefix="charpin-probe-root-", dir=parent))
    if package.parent.is_file():
        return folder, [str(package.parent)], str(package)
    (folder / "charpin_runner").symlink_to(package, target_is_directory=True)
    return folder, [], os.path.realpath(package)


@dataclass(frozen=True)
class Command:
    """The test command as it will run: argv, and the probe root it needs (to protect)."""

    argv: list[str]
    root: Path


def rewrite(
    argv: list[str],
    repo: Path,
    env_path: str,
    parent: Optional[Path] = None,
    shown: Optional[list[str]] = None,
) -> Command:
    """argv (the configured test command, with charpin's options appended) with pytest started
    through the boot. ConfigError when argv starts pytest in no form charpin can protect;
    shown: the command as configured, for that message."""
    script = _pytest_script(argv[0], repo, env_path) if argv else None
    if script is not None:
        interpreter, argv0 = script
        head, tail, path0 = [interpreter], argv[1:], False
    else:
        at = _dash_m_pytest(argv)
        if at is None:
            raise ConfigError(
                f"test_command {shown or argv[:3]!r} does not start pytest as `PYTHON -m pytest` or as a "
                "pytest script, so charpin cannot load its probe before the checkout's code; "
                'use test_command = ["python", "-m", "pytest"] (pytest options go in '
                "pytest_args)"
            )
        head, tail, path0, argv0 = argv[:at], argv[at + 2 :], True, ""
    folder, extra, package = make_root(parent)
    boot = folder / BOOT_NAME
    source = BOOT % {
        "args": (str(folder), extra, package, path0, argv0),
        "pythonpath_var": PYTHONPATH_VAR,
        "identity_var": IDENTITY_VAR,
        "worker_boot": WORKER_BOOT_NAME,
        "tripwire": TRIPWIRE_STATUS,
    }
    boot.write_text(source, encoding="utf-8")
    worker = WORKER_BOOT % {
        "args": (str(folder), extra, package),
        "pythonpath_var": PYTHONPATH_VAR,
        "tripwire": TRIPWIRE_STATUS,
    }
    (folder / WORKER_BOOT_NAME).write_text(worker, encoding="utf-8")
    return Command(argv=[*head, str(boot), *tail], root=folder)


def discard(command: Command) -> None:
    """Remove the probe root once the run is over."""
    shutil.rmtree(command.root, ignore_errors=True)


def environment(env: dict[str, str], record_fd: Optional[int] = None) -> dict[str, str]:
    """env for the boot: PYTHONPATH moved aside (the boot restores it after the probe loaded),
    and the identity of the parent's record pipe (record_fd, its write end) for the boot to
    check."""
    out = dict(env)
    given = out.pop("PYTHONPATH", None)
    out.pop(PYTHONPATH_VAR, None)
    out.pop(IDENTITY_VAR, None)
    if given is not None:
        out[PYTHONPATH_VAR] = given
    if record_fd is not None:
        st = os.fstat(record_fd)
        out[IDENTITY_VAR] = f"{st.st_dev}:{st.st_ino}"
    return out


def interpreter_of(program: str, repo: Path, env_path: str) -> str:
    """The Python interpreter program runs on: program itself, or the one its shebang names
    (a console script such as `coverage`); the sandbox makes that interpreter visible."""
    found = program if os.sep in program else shutil.which(program, path=env_path)
    if found is not None and not os.path.isabs(found):
        found = str(repo / found)
    if found is None or not os.path.isfile(found):
        return program
    try:
        with open(found, "rb") as handle:
            head = handle.read(_SHEBANG_BYTES)
    except OSError:
        return found
    return _interpreter(head, env_path) or found


def _dash_m_pytest(argv: list[str]) -> Optional[int]:
    """Where `-m pytest` is in argv (an interpreter's, or `coverage run`'s), or None."""
    for i in range(1, len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] == "pytest":
            return i
    return None


def _pytest_script(program: str, repo: Path, env_path: str) -> Optional[tuple[str, str]]:
    """(interpreter, script path) when program is a pytest console script with a Python
    shebang; None for anything else."""
    if not _PYTEST_SCRIPTS.fullmatch(os.path.basename(program)):
        return None
    if os.sep in program:
        found: Optional[str] = program if os.path.isabs(program) else str(repo / program)
    else:
        found = shutil.which(program, path=env_path)
    if found is None or not os.path.isfile(found):
        return None
    try:
        with open(found, "rb") as handle:
            head = handle.read(_SHEBANG_BYTES)
    except OSError:
        return None
    interpreter = _interpreter(head, env_path)
    return None if interpreter is None else (interpreter, found)


def _interpreter(head: bytes, env_path: str) -> Optional[str]:
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    if line in ("/bin/sh", "/usr/bin/sh"):
        match = _SH_EXEC.search(head)
        return match.group(1).decode("utf-8", "replace") if match else None
    words = line.split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return shutil.which(rest[0], path=env_path) if rest else None
    return words[0]

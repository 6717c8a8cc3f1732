"""What a pin's argv[0] names (targets.py), and the bootstrap's -m and --entry modes, which must
behave as `python -m MODULE` and an installed console script do."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from charpin_runner.errors import RunError
from charpin_runner.pins.bootstrap import BOOTSTRAP, ENV_VAR
from charpin_runner.pins.crash import find_crash
from charpin_runner.pins.model import Case, Observation
from charpin_runner.pins.targets import default_pythonpath, python_shebang, start

from tests.py39 import pythons

PYTHONS = pythons()

CLI = """\
import os, sys
from shop import helper
def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
    print(__name__, os.path.basename(sys.argv[0]), sys.argv[1:], helper.VALUE)
    print(os.environ.get("A_KEY"), "B_KEY" in os.environ)
    if mode == "exit":
        return 7
    if mode == "raise":
        raise ValueError("boom")
    if mode == "message":
        sys.exit("bad input")
    return 0
"""


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    """src/shop: a package with __main__.py, a cli module and a helper."""
    pkg = tmp_path / "src" / "shop"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("VALUE = 42\n")
    (pkg / "cli.py").write_text(CLI)
    (pkg / "__main__.py").write_text("import sys\nfrom shop.cli import main\nsys.exit(main())\n")
    (tmp_path / "boot.py").write_text(BOOTSTRAP)
    # What pip writes for `shop-run = "shop.cli:main"`, to compare --entry against.
    wrapper = tmp_path / "bin" / "shop-run"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "import re, sys\nfrom shop.cli import main\nif __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        "    sys.exit(main())\n"
    )
    return tmp_path


def _run(
    argv: list[str], root: Path, reads: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {"A_KEY": "a", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(root / "src")}
    if reads is not None:
        env[ENV_VAR] = str(reads)
    work = root / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run(argv, capture_output=True, env=env, cwd=work, timeout=60, check=False)


def _without_runpy_frames(stderr: bytes) -> bytes:
    """Plain `python -m` tracebacks start in runpy, whose file differs between Pythons."""
    lines = stderr.splitlines(keepends=True)
    out = []
    skip = False
    for line in lines:
        if line.startswith(b'  File "') and b"runpy" in line:
            skip = True
            continue
        if skip and line.startswith(b"    "):
            continue
        skip = False
        out.append(line)
    return b"".join(out)


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("mode", ["ok", "exit", "raise", "message"])
def test_module_mode_runs_as_python_dash_m(lib: Path, python: str, mode: str) -> None:
    plain = _run([python, "-m", "shop", mode], lib)
    reads = lib / "reads"
    boot = _run([python, str(lib / "boot.py"), "-m", "shop", mode], lib, reads)
    assert boot.returncode == plain.returncode
    assert boot.stdout == plain.stdout
    assert plain.stdout.startswith(b"shop.cli __main__.py ['" + mode.encode() + b"'] 42\n")
    assert boot.stderr == _without_runpy_frames(plain.stderr)
    if mode == "raise":
        assert b"runpy" not in boot.stderr and b"boot.py" not in boot.stderr
        assert b'cli.py", line 10, in main' in boot.stderr
    assert reads.read_text().split("\n") == ["A_KEY", "B_KEY"]


@pytest.mark.parametrize("python", PYTHONS)
def test_a_missing_module_is_reported_without_the_interpreter_path(lib: Path, python: str) -> None:
    plain = _run([python, "-m", "nosuch"], lib)
    boot = _run([python, str(lib / "boot.py"), "-m", "nosuch"], lib)
    assert plain.stderr.startswith(python.encode() + b": No module named nosuch")
    assert (boot.returncode, boot.stdout, boot.stderr) == (
        1,
        b"",
        b"python: No module named nosuch\n",
    )


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("mode", ["ok", "exit", "raise", "message"])
def test_entry_mode_runs_as_the_installed_console_script(lib: Path, python: str, mode: str) -> None:
    plain = _run([python, str(lib / "bin" / "shop-run"), mode], lib)
    reads = lib / "reads"
    boot = _run(
        [python, str(lib / "boot.py"), "--entry", "shop.cli:main", "shop-run", mode], lib, reads
    )
    assert (boot.returncode, boot.stdout) == (plain.returncode, plain.stdout)
    assert plain.stdout.startswith(b"shop.cli shop-run ['" + mode.encode() + b"'] 42\n")
    if mode == "raise":
        # The wrapper's own frame is replaced by nothing: the traceback starts in the program.
        assert boot.stderr.splitlines()[1].startswith(b'  File "' + str(lib).encode())
        assert b"boot.py" not in boot.stderr
        assert boot.stderr.endswith(b"ValueError: boom\n")
    else:
        assert boot.stderr == plain.stderr
    assert reads.read_text().split("\n") == ["A_KEY", "B_KEY"]


def _kind(repo: Path, *argv: str, scripts: dict[str, str] | None = None) -> tuple[str, list[str]]:
    got = start(Case("p", tuple(argv)), repo, "/py", repo / "boot.py", lambda: scripts or {})
    return got.kind, got.argv


def test_argv0_decides_how_a_pin_starts(lib: Path) -> None:
    (lib / "bin" / "tool").write_text("#!/usr/bin/env python3\nprint(1)\n")
    (lib / "bin" / "run.sh").write_text("#!/bin/sh\necho 1\n")
    (lib / "job.py").write_text("print(1)\n")
    boot, repo = str(lib / "boot.py"), str(lib)
    assert _kind(lib, "-m", "shop", "x") == ("module", ["/py", boot, "-m", "shop", "x"])
    assert _kind(lib, "python", "-m", "shop") == ("module", ["/py", boot, "-m", "shop"])
    assert _kind(lib, "python3", "job.py") == ("script", ["/py", boot, f"{repo}/job.py"])
    assert _kind(lib, "python", "-c", "print(1)") == ("python", ["/py", "-c", "print(1)"])
    assert _kind(lib, "bin/tool", "a") == ("script", ["/py", boot, f"{repo}/bin/tool", "a"])
    assert _kind(lib, "bin/run.sh") == ("command", [f"{repo}/bin/run.sh"])
    assert _kind(lib, "shop-run", "-v", scripts={"shop-run": "shop.cli:main [cli]"}) == (
        "console-script",
        ["/py", boot, "--entry", "shop.cli:main", "shop-run", "-v"],
    )
    assert _kind(lib, "git", "status", scripts={"shop-run": "shop.cli:main"}) == (
        "command",
        ["git", "status"],
    )
    assert _kind(lib, "python3.8", "-m", "shop")[0] == "command"  # a versioned name is a command


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("-m",), "-m must be followed by a module name, not nothing"),
        (("-m", "not a module"), "-m must be followed by a module name, not 'not a module'"),
        (("gone.py",), "script gone.py not found in the repository"),
        (("odd",), "console script odd is declared as 'pkg', not `module:function`"),
    ],
)
def test_bad_targets_name_the_fix(lib: Path, argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(RunError) as caught:
        _kind(lib, *argv, scripts={"odd": "pkg"})
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("first_line", "python"),
    [
        ("#!/usr/bin/env python", True),
        ("#!/usr/bin/env python3", True),
        ("#!/usr/bin/python3.11 -u", True),
        ("#! /usr/bin/env -S PYTHONUTF8=1 python3 -X dev", True),
        ("#!/bin/sh", False),
        ("#!/usr/bin/env bash", False),
        ("#!/usr/bin/env pythonista", False),
        ("import sys", False),
    ],
)
def test_python_shebangs_are_recognised(tmp_path: Path, first_line: str, python: bool) -> None:
    script = tmp_path / "tool"
    script.write_text(first_line + "\nprint(1)\n")
    assert python_shebang(script) is python


def test_the_default_pythonpath_is_the_root_and_src_when_present(tmp_path: Path) -> None:
    assert default_pythonpath(tmp_path) == ["."]
    (tmp_path / "src").mkdir()
    assert default_pythonpath(tmp_path) == [".", "src"]


def _crash_of(repo: Path, stderr: bytes, exit_code: int = 1) -> tuple[str, str | None] | None:
    crash = find_crash(repo, Observation(exit_code=exit_code, stdout=b"", stderr=stderr))
    return None if crash is None else (crash.module, crash.root)


TRACEBACK = b'Traceback (most recent call last):\n  File "$REPO/bin/tool", line 2, in <module>\n'


def test_an_import_crash_is_the_last_stderr_line_and_located_in_the_repository(
    tmp_path: Path,
) -> None:
    (tmp_path / "lib" / "legacy").mkdir(parents=True)
    (tmp_path / "lib" / "legacy" / "__init__.py").write_text("")
    (tmp_path / "lib" / "legacy" / "sync.py").write_text("")
    (tmp_path / "src" / "nspkg").mkdir(parents=True)  # a namespace package: no __init__.py
    (tmp_path / "src" / "nspkg" / "mod.py").write_text("")
    (tmp_path / "tool.py").write_text("")
    missing = b"ModuleNotFoundError: No module named '%s'\n"
    assert _crash_of(tmp_path, TRACEBACK + missing % b"legacy") == ("legacy", "lib")
    assert _crash_of(tmp_path, TRACEBACK + missing % b"legacy.sync") == ("legacy.sync", "lib")
    assert _crash_of(tmp_path, TRACEBACK + missing % b"nspkg") == ("nspkg", "src")
    assert _crash_of(tmp_path, TRACEBACK + missing % b"tool") == ("tool", ".")
    assert _crash_of(tmp_path, b"python: No module named legacy\n") == ("legacy", "lib")
    # A module that exists nowhere in the repository: a dependency the pins' Python lacks.
    assert _crash_of(tmp_path, TRACEBACK + missing % b"yaml") == ("yaml", None)
    assert _crash_of(tmp_path, TRACEBACK + missing % b"legacy.gone") == ("legacy.gone", None)
    # Not a crash: a zero exit, or a program that reports import problems and goes on.
    assert _crash_of(tmp_path, missing % b"legacy", exit_code=0) is None
    assert _crash_of(tmp_path, missing % b"legacy" + b"1 module could not be checked\n") is None
    crash = find_crash(tmp_path, Observation(1, b"", TRACEBACK + missing % b"legacy"))
    assert crash is not None
    assert 'set [tool.charpin.pins] pythonpath = [".", "lib"]' in crash.message("p", ["."])
    assert "-m legacy" in crash.message("p", [".", "lib"])

"""Rule 1 inside the judged pytest: charpin's harness never runs code of the checkout in its place.

Three attacks of the first attacker round (b17, b18, b15), each with a second attack of its class
that nobody fixed by hand, run for real through `charpin-remote run --hosts local,clean`:

* the checkout ships a module pytest imports lazily (`packaging/` for minversion, then
  `tomllib.py` for pyproject.toml and `difflib.py` for an assertion's diff): the boot imports
  pytest's whole dependency closure before the checkout is importable;
* pytest-xdist's workers (autoloading a `*.dist-info` of the checkout, then importing `pluggy`
  from it, or running the PYTHONPATH's sitecustomize.py) start through charpin's worker boot;
* a conftest points the probe's record descriptor at a pipe of its own (the one named on the
  command line, then the private copies it finds in /proc/self/fd): the boot took the pipe
  over, and every write checks its identity.

An attacking module writes `ATTEMPT ...` to its standard error (an xdist worker's stdout is
execnet's channel), so the run folder's stderr.log shows whether it ran on each box.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.hostile.harness import SAY_TOML, repo_with, run

SUITE = "def test_ok():\n    pass\n\n\ndef test_bad():\n    assert 0\n"
BAD = "tests/test_suite.py::test_bad"
HOSTS = "local,clean"

# A module of the checkout named like one of pytest's: says it ran, then hands the real one
# over (so the run goes on as if nothing happened).
SHADOW = """
import importlib, os, sys
os.write(2, b"\\nATTEMPT shadow {name} ran\\n")
_here = os.path.dirname(os.path.abspath(__file__))
if os.path.basename(__file__) == "__init__.py":
    _here = os.path.dirname(_here)
_saved = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules[__name__]
try:
    _real = importlib.import_module(__name__)
finally:
    sys.path[:] = _saved
sys.modules[__name__] = _real
globals().update({{k: v for k, v in vars(_real).items() if not k.startswith("__")}})
"""

# Hides the failure when it runs as a plugin (the worker side of xdist).
HIDING_PLUGIN = """
import os
os.write(2, b"\\nATTEMPT plugin from the checkout ran\\n")

def pytest_runtest_makereport(item, call):
    if call.excinfo is not None and call.when == "call":
        call.excinfo = None
"""


def _boxes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {box["label"]: box for box in report["boxes"]}


def _said(folder: Path, box: str) -> str:
    return "".join(
        (folder / box / name).read_text(errors="replace") for name in ("stdout.log", "stderr.log")
    )


def _never_ran(folder: Path, what: str, hosts: str = HOSTS) -> None:
    for box in hosts.split(","):
        assert f"ATTEMPT {what}" not in _said(folder, box), f"{what} on {box}"


def _failure_kept(code: int, report: dict[str, Any]) -> None:
    assert report["not_evaluated"] == [], report["not_evaluated"]
    boxes = _boxes(report)
    assert sorted(boxes) == sorted(HOSTS.split(","))
    for box in boxes.values():
        assert BAD in box["failing"], box
        assert box["interpretation"] != "ok", box
    assert code & 1


# -- b17: a package pytest imports lazily -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shadow", "toml", "suite"),
    [
        # The attack of the round: pytest imports packaging when minversion is set.
        (
            "packaging/__init__.py",
            '[tool.pytest.ini_options]\nminversion = "7.0"\n',
            SUITE,
        ),
        # Same class, nobody listed them: the standard library's tomllib, which pytest imports
        # to read pyproject.toml, and difflib, which it imports to explain a failed comparison.
        ("tomllib.py", "", SUITE),
        ("difflib.py", "", SUITE + "\n\ndef test_diff():\n    assert 'a\\nb' == 'a\\nc'\n"),
    ],
    ids=["packaging", "tomllib", "difflib"],
)
def test_a_checkout_module_pytest_imports_lazily_never_stands_in_for_it(
    shadow: str, toml: str, suite: str, tmp_path: Path
) -> None:
    name = shadow.split("/")[0].removesuffix(".py")
    repo = repo_with(
        tmp_path / "repo",
        {shadow: SHADOW.format(name=name), "tests/test_suite.py": suite},
        toml=SAY_TOML + toml,
    )
    code, report, folder = run(repo, HOSTS)
    _never_ran(folder, f"shadow {name} ran")
    _failure_kept(code, report)


@pytest.mark.slow
def test_a_harness_module_taken_from_the_checkout_later_makes_the_run_incomplete(
    tmp_path: Path,
) -> None:
    """The check behind the preload: a conftest that drops pytest's packaging from sys.modules
    and imports the checkout's in its place is named at the end of the run."""
    repo = repo_with(
        tmp_path / "repo",
        {
            "packaging/__init__.py": "VERSION = 'the checkout'\n",
            "tests/conftest.py": "import sys\nsys.modules.pop('packaging', None)\nimport packaging\n",
            "tests/test_suite.py": SUITE,
        },
    )
    code, report, folder = run(repo, HOSTS)
    assert report["not_evaluated"] == [], report["not_evaluated"]
    for label, box in _boxes(report).items():
        assert box["interpretation"] == "incomplete", box
        assert BAD in box["failing"], box
        receipt = (folder / label / "receipt.json").read_text()
        assert "pytest's own module packaging was imported from the checkout" in receipt
        assert "packaging/__init__.py" in receipt
    assert code != 0


# -- b18: pytest-xdist's workers ---------------------------------------------------------------

XDIST = '[tool.pytest.ini_options]\naddopts = "-n 2"\n'


@pytest.mark.slow
def test_xdist_workers_never_autoload_a_dist_info_of_the_checkout(tmp_path: Path) -> None:
    repo = repo_with(
        tmp_path / "repo",
        {
            "zz-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: zz\nVersion: 1.0\n",
            "zz-1.0.dist-info/entry_points.txt": "[pytest11]\nzz = zzplugin\n",
            "zzplugin.py": HIDING_PLUGIN,
            "tests/test_suite.py": SUITE,
        },
        toml=SAY_TOML + XDIST,
    )
    code, report, folder = run(repo, HOSTS)
    _never_ran(folder, "plugin from the checkout ran")
    _failure_kept(code, report)


@pytest.mark.slow
def test_xdist_workers_never_import_the_harness_from_the_checkout(tmp_path: Path) -> None:
    """Same class, not fixed by hand: a worker was `python -c ...` in the checkout, which put
    the checkout first on sys.path before xdist's own code imported pytest and pluggy."""
    repo = repo_with(
        tmp_path / "repo",
        {"pluggy/__init__.py": SHADOW.format(name="pluggy"), "tests/test_suite.py": SUITE},
        toml=SAY_TOML + XDIST,
    )
    code, report, folder = run(repo, HOSTS)
    _never_ran(folder, "shadow pluggy ran")
    _failure_kept(code, report)


@pytest.mark.slow
def test_xdist_workers_never_run_a_sitecustomize_of_the_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same class: with PYTHONPATH=. (local gives the tests the user's environment) every
    worker's interpreter ran the checkout's sitecustomize.py at start-up; a worker that xdist
    starts again after a test crashed it too. The tests still get PYTHONPATH."""
    repo = repo_with(
        tmp_path / "repo",
        {
            "sitecustomize.py": "import os\nos.write(2, b'\\nATTEMPT sitecustomize ran\\n')\n",
            "tests/test_suite.py": SUITE
            + "\n\ndef test_pythonpath_is_given_back():\n"
            "    import os\n"
            "    assert os.environ['PYTHONPATH'].split(os.pathsep)[0] == '.'\n"
            "\n\ndef test_crash():\n"
            "    import os\n"
            "    os._exit(1)\n",
        },
        toml=SAY_TOML + XDIST,
    )
    monkeypatch.setenv("PYTHONPATH", ".")
    code, report, folder = run(repo, "local")
    _never_ran(folder, "sitecustomize ran", "local")
    assert "replacing crashed worker" in _said(folder, "local")
    (box,) = report["boxes"]
    assert BAD in box["failing"], box
    assert "tests/test_suite.py::test_pythonpath_is_given_back" not in box["failing"], box
    assert code & 1


# -- b15: the record's descriptor --------------------------------------------------------------

# The round's attack: the descriptor named on the command line, swapped for a pipe of the
# conftest's own, whose pump relabels every failure before it reaches the parent.
PUMP = """
import atexit, json, os, stat, sys, threading

def _pump(read_end, out):
    with os.fdopen(read_end, "rb") as source:
        for raw in source:
            try:
                line = json.loads(raw)
            except ValueError:
                os.write(out, raw)
                continue
            if line.get("kind") == "report" and line.get("outcome") in ("failed", "error"):
                line["outcome"] = "passed"
            if line.get("kind") in ("failing", "tampered"):
                continue
            if line.get("kind") == "finish":
                line["exitstatus"] = 0
                line["failing"] = []
            os.write(out, (json.dumps(line) + "\\n").encode())

def _interpose(targets):
    real = os.dup(targets[0])
    read_end, write_end = os.pipe()
    for fd in targets:
        os.dup2(write_end, fd)
    os.close(write_end)
    thread = threading.Thread(target=_pump, args=(read_end, real))
    thread.start()
    atexit.register(thread.join)

def _pipes():
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if int(name) > 2 and stat.S_ISFIFO(os.fstat(int(name)).st_mode):
                found.append(int(name))
        except OSError:
            pass
    return sorted(found)
"""
NAMED = PUMP + """
_arg = next(a for a in sys.argv if a.startswith("--charpin-receipt=fd:"))
_interpose([int(_arg.rsplit(":", 1)[1])])
"""
FIRST_PIPE = PUMP + "\n_interpose(_pipes()[:1])\n"
EVERY_PIPE = PUMP + "\n_interpose(_pipes())\n"
SESSION = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    session.testsfailed = 0
    session.exitstatus = 0
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("attack", "interpretation", "said_in_receipt"),
    [
        # The round's attack: the named descriptor is not the record any more when the conftest
        # runs (the number may be reused: the pump relabels something else). The record is
        # whole, and contradicts the masked exit status.
        (NAMED, "incomplete", "the exit status was masked"),
        # Same class: the private copies found in /proc. One of them: the probe's next line
        # goes through the spare copy and says what happened.
        (FIRST_PIPE, "incomplete", "the code under test replaced the probe's channel"),
        # All of them: the probe has no channel left and ends the run at once (status 3, never
        # a verdict), before any test ran.
        (EVERY_PIPE, "internal-error", "the test session never started"),
    ],
    ids=["named-fd", "first-private-copy", "every-copy"],
)
def test_a_conftest_interposing_on_the_record_descriptor_never_gets_a_clean_run(
    attack: str, interpretation: str, said_in_receipt: str, tmp_path: Path
) -> None:
    repo = repo_with(
        tmp_path / "repo",
        {"tests/conftest.py": attack + SESSION, "tests/test_suite.py": SUITE},
    )
    code, report, folder = run(repo, HOSTS)
    assert report["not_evaluated"] == [], report["not_evaluated"]
    boxes = _boxes(report)
    assert sorted(boxes) == sorted(HOSTS.split(","))
    for label, box in boxes.items():
        assert box["interpretation"] == interpretation, box
        if interpretation == "incomplete":
            assert BAD in box["failing"], box
        receipt = (folder / label / "receipt.json").read_text()
        assert said_in_receipt in receipt
        assert "passed, 0 failed" not in receipt
    assert code != 0


@pytest.mark.slow
def test_the_preload_leaves_a_warnings_as_errors_suite_under_xdist_clean(tmp_path: Path) -> None:
    """Not an attack: pytest warns about every plugin module imported before it could rewrite
    it, and `filterwarnings = error` makes that warning fatal. The preloaded pytest-xdist says
    it is not to be rewritten, so such a suite runs as it does without charpin."""
    repo = repo_with(
        tmp_path / "repo",
        {"tests/test_suite.py": "def test_ok():\n    pass\n"},
        toml=SAY_TOML + XDIST + 'filterwarnings = ["error"]\n',
    )
    code, report, folder = run(repo, HOSTS)
    assert code == 0, report
    for box in _boxes(report).values():
        assert box["interpretation"] == "ok", box
    for box in HOSTS.split(","):
        assert "PytestAssertRewriteWarning" not in _said(folder, box)

"""Subtests (unittest's subTest, pytest's `subtests` fixture) are counted in the receipt, a
failing one makes its test `failed`, and a different number of subtests is drift (#10 item 2).

The project is shaped like the itertools library that showed the problem: table-driven
unittest cases that loop over inputs with `self.subTest(...)`, plus a pytest test using the
`subtests` fixture over golden files. Runs with the installed pytest (9: built-in subtests) and,
where it can be installed, pytest 8 with the pytest-subtests plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from charpin_coordinator.cli import main

from tests.conftest import git, make_repo

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")

CHUNKED = {
    "more_iter/__init__.py": (
        "def chunked(items, n):\n"
        "    items = list(items)\n"
        "    return [items[i:i + n] for i in range(0, len(items), n)]\n"
    ),
    "tests/__init__.py": "",
    "tests/test_chunked.py": (
        "import unittest\n"
        "from more_iter import chunked\n\n"
        "CASES = [([1, 2, 3], 2, [[1, 2], [3]]), ([], 3, []), ([1, 2], 1, [[1], [2]])]\n\n"
        "class ChunkedTests(unittest.TestCase):\n"
        "    def test_table(self):\n"
        "        for items, n, want in CASES:\n"
        "            with self.subTest(items=items, n=n):\n"
        "                self.assertEqual(chunked(items, n), want)\n\n"
        "    def test_plain(self):\n"
        "        self.assertEqual(chunked([1], 1), [[1]])\n"
    ),
    "tests/test_golden.py": (
        "from pathlib import Path\n"
        "from more_iter import chunked\n\n"
        "CASES = Path(__file__).parent / 'cases'\n\n"
        "def test_golden_files(subtests):\n"
        "    for case in sorted(CASES.glob('*.txt')):\n"
        "        with subtests.test(msg='golden', case=case.name):\n"
        "            words = case.read_text().split()\n"
        "            assert sum(len(c) for c in chunked(words, 2)) == len(words)\n"
    ),
    "tests/cases/a.txt": "one two three\n",
    "tests/cases/b.txt": "four five\n",
}

# A wrong edge case: chunked([], n) now returns [[]], so one table row fails.
BROKEN_EMPTY = (
    "def chunked(items, n):\n"
    "    items = list(items)\n"
    "    return [items[i:i + n] for i in range(0, len(items), n)] or [[]]\n"
)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def _receipt(repo: Path, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    done = subprocess.run(
        [sys.executable, "-m", "charpin_runner", "receipt", "--repo", str(repo), "-o", str(out)]
        + (["--", *extra] if extra else []),
        env={**os.environ, "PYTHONPATH": RUNNER},
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )
    assert out.exists(), done.stderr
    return done, json.loads(out.read_text())


def _break(repo: Path) -> None:
    (repo / "more_iter" / "__init__.py").write_text(BROKEN_EMPTY)
    git(repo, "commit", "-qam", "empty input gives one empty chunk")


def _check_failing_subtest(done: subprocess.CompletedProcess[str], receipt: dict) -> None:
    table = "tests/test_chunked.py::ChunkedTests::test_table"
    assert receipt["outcomes"][table] == "failed"
    assert receipt["outcomes"]["tests/test_chunked.py::ChunkedTests::test_plain"] == "passed"
    sub = receipt["subtests"][table]
    assert (sub["passed"], sub["failed"], sub["skipped"]) == (2, 1, 0)
    assert len(sub["failing"]) == 1 and "items=[]" in sub["failing"][0]
    assert "n=3" in sub["failing"][0]
    golden = receipt["subtests"]["tests/test_golden.py::test_golden_files"]
    assert (golden["passed"], golden["failed"]) == (2, 0)
    assert receipt["exit"]["interpretation"] == "failed"
    assert done.returncode == 1
    # A subtest failing is pytest's own verdict, not a hook rewriting an outcome.
    assert not [r for r in receipt["exit"]["reasons"] if "rewritten" in r]
    assert "subtests 4 passed, 1 failed" in done.stdout


def test_a_failing_unittest_subtest_fails_its_test_and_is_named(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "more_iter", CHUNKED)
    done, receipt = _receipt(repo, tmp_path / "green.json")
    assert receipt["exit"]["interpretation"] == "ok", receipt["exit"]
    assert receipt["subtests"]["tests/test_chunked.py::ChunkedTests::test_table"] == {
        "passed": 3,
        "failed": 0,
        "skipped": 0,
        "failing": [],
    }
    assert "subtests 5 passed" in done.stdout
    _break(repo)
    done, receipt = _receipt(repo, tmp_path / "red.json")
    _check_failing_subtest(done, receipt)


def test_failing_pytest_subtests_under_xdist(tmp_path: Path) -> None:
    files = dict(CHUNKED)
    files["tests/test_golden.py"] = CHUNKED["tests/test_golden.py"].replace(
        "== len(words)", "== len(words) and len(words) % 2 == 0"
    )
    repo = make_repo(tmp_path / "more_iter", files)
    done, receipt = _receipt(repo, tmp_path / "r.json", "-n", "2")
    golden = receipt["subtests"]["tests/test_golden.py::test_golden_files"]
    assert (golden["passed"], golden["failed"]) == (1, 1)
    assert golden["failing"] == ["[golden] (case='a.txt')"] or golden["failing"] == [
        "[golden] (case=\"'a.txt'\")"
    ], golden["failing"]
    assert receipt["outcomes"]["tests/test_golden.py::test_golden_files"] == "failed"
    assert not [r for r in receipt["exit"]["reasons"] if "rewritten" in r]
    # xdist workers find the same rootdir as the controller, so ids are the repository's.
    assert not [r for r in receipt["exit"]["reasons"] if "not rebased" in r]
    assert done.returncode == 1


def test_compare_shows_the_subtest_counts_that_moved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path / "more_iter", CHUNKED)
    _receipt(repo, tmp_path / "a.json")
    (repo / "tests" / "cases" / "c.txt").write_text("six\n")
    _receipt(repo, tmp_path / "b.json")
    capsys.readouterr()
    main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json"])
    report = json.loads(capsys.readouterr().out)
    rows = next(d for d in report["dimensions"] if d["name"] == "outcomes")["matrix"]
    row = next(r for r in rows if r["item"] == "tests/test_golden.py::test_golden_files")
    assert sorted(row["values"].values()) == [
        "passed · subtests 2 passed",
        "passed · subtests 3 passed",
    ]


def test_a_failing_subtest_shows_in_text_markdown_and_junit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path / "more_iter", CHUNKED)
    _break(repo)
    runs = tmp_path / "runs"
    code = main(
        [
            "run",
            "--repo",
            str(repo),
            "--hosts",
            "local",
            "--out",
            str(runs),
            "--run-id",
            "r1",
            "--junit",
            str(tmp_path / "junit.xml"),
        ]
    )
    text = capsys.readouterr().out
    assert code & 1
    assert "test_table · failing subtests (items=[], n=3)" in text
    markdown = (runs / "r1" / "drift.md").read_text()
    assert "failing subtests (items=\\[\\], n=3)" in markdown or (
        "failing subtests (items=[], n=3)" in markdown
    )
    junit = (tmp_path / "junit.xml").read_text()
    assert "failing subtests:\n(items=[], n=3)" in junit


def _pytest8_python(base: Path) -> str:
    """A venv with pytest 8 and the pytest-subtests plugin, or a skip naming why."""
    env_dir = base / "pytest8"
    python = env_dir / "bin" / "python"
    if python.exists():
        return str(python)
    venv.EnvBuilder(with_pip=True).create(env_dir)
    got = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "pytest==8.4.2", "pytest-subtests==0.15.0"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if got.returncode != 0:
        if os.environ.get("CHARPIN_REQUIRE_PYPI") == "1":
            pytest.fail(f"cannot install pytest 8 from PyPI: {got.stderr[-500:]}")
        pytest.skip("pytest 8 and pytest-subtests cannot be installed here (no package index)")
    return str(python)


@pytest.fixture(scope="module")
def pytest8(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _pytest8_python(tmp_path_factory.mktemp("venvs"))


@pytest.mark.slow
def test_pytest8_with_the_subtests_plugin(tmp_path: Path, pytest8: str) -> None:
    files = dict(CHUNKED)
    files["pyproject.toml"] = (
        f'[tool.charpin]\ntest_command = ["{pytest8}", "-m", "pytest"]\n'
    )
    repo = make_repo(tmp_path / "more_iter", files)
    _break(repo)
    done, receipt = _receipt(repo, tmp_path / "r.json")
    assert receipt["environment"]["pytest_version"].startswith("8.")
    _check_failing_subtest(done, receipt)

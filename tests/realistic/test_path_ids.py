"""Tests parametrized over absolute file paths have the same ids in every checkout (#10 item 3).

The project is shaped like the HTML-to-Markdown converter that showed the problem: golden files
under tests/cases, one test per file, parametrized with the files' absolute paths (pytest then
puts the path into the node id). `local` runs in the working tree and `clean` in a fresh clone
elsewhere, so without normalisation every id differs and Collection parity fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from charpin_coordinator.cli import main

from tests.conftest import make_repo

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")

CONVERTER = {
    "html2md/__init__.py": (
        "import re\n\n"
        "def convert(html):\n"
        "    html = re.sub(r'<b>(.*?)</b>', r'**\\1**', html)\n"
        "    return re.sub(r'<[^>]+>', '', html)\n"
    ),
    "tests/test_golden.py": (
        "from pathlib import Path\n"
        "import pytest\n"
        "from html2md import convert\n\n"
        "CASES = sorted(Path(__file__).resolve().parent.joinpath('cases').glob('*.html'))\n\n"
        "@pytest.mark.parametrize('path', [str(p) for p in CASES])\n"
        "def test_file(path):\n"
        "    want = Path(path).with_suffix('.md').read_text()\n"
        "    assert convert(Path(path).read_text()) == want\n"
    ),
    "tests/cases/bold.html": "<p><b>hi</b></p>",
    "tests/cases/bold.md": "**hi**",
    "tests/cases/plain.html": "<p>text</p>",
    "tests/cases/plain.md": "text",
}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.mark.slow
def test_path_parametrized_ids_agree_between_local_and_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path / "html2md", CONVERTER)
    runs = tmp_path / "runs"
    code = main(
        ["run", "--repo", str(repo), "--hosts", "local,clean", "--out", str(runs), "--run-id", "r"]
    )
    text = capsys.readouterr().out
    report = json.loads((runs / "r" / "drift.json").read_text())
    assert [d["name"] for d in report["dimensions"] if d["gating"]] == [], text
    assert code == 0, text
    receipt = json.loads((runs / "r" / "local" / "receipt.json").read_text())
    ids = sorted(receipt["outcomes"])
    assert ids == [
        "tests/test_golden.py::test_file[{repo}/tests/cases/bold.html]",
        "tests/test_golden.py::test_file[{repo}/tests/cases/plain.html]",
    ]
    assert receipt["environment"]["id_root"] == str(repo.resolve())
    clean = json.loads((runs / "r" / "clean" / "receipt.json").read_text())
    assert clean["environment"]["id_root"] not in (None, str(repo.resolve()))
    # Where {repo} points on each box is in the report, for the raw id.
    assert f"ids: {{repo}} = {repo.resolve()}" in text


def test_a_sibling_folder_is_not_taken_for_the_repository(tmp_path: Path) -> None:
    files = dict(CONVERTER)
    sibling = tmp_path / "html2md-data"
    sibling.mkdir()
    (sibling / "x.html").write_text("x")
    files["tests/test_sibling.py"] = (
        "import pytest\n\n"
        f"@pytest.mark.parametrize('path', [{str(sibling / 'x.html')!r}])\n"
        "def test_sibling(path):\n"
        "    assert path\n"
    )
    repo = make_repo(tmp_path / "html2md", files)
    out = tmp_path / "r.json"
    main_code = _receipt(repo, out)
    receipt = json.loads(out.read_text())
    assert main_code == 0
    assert f"tests/test_sibling.py::test_sibling[{sibling}/x.html]" in receipt["outcomes"]


def _receipt(repo: Path, out: Path) -> int:
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "charpin_runner", "receipt", "--repo", str(repo), "-o", str(out)],
        env={**os.environ, "PYTHONPATH": RUNNER},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return done.returncode


def test_a_long_relative_path_gets_the_same_short_id_in_every_checkout(tmp_path: Path) -> None:
    files = dict(CONVERTER)
    deep = "tests/cases/" + "/".join(["nested-folder-of-golden-files"] * 3) + "/deep.html"
    files[deep] = "<b>x</b>"
    files[deep.replace(".html", ".md")] = "**x**"
    files["tests/test_golden.py"] = files["tests/test_golden.py"].replace(
        "glob('*.html')", "rglob('*.html')"
    )
    short = make_repo(tmp_path / "a", files)
    long_parent = tmp_path / ("p" * 60)
    long_parent.mkdir()
    other = long_parent / "html2md"
    from tests.conftest import git

    git(tmp_path, "clone", "-q", str(short), str(other))
    ids = []
    for repo, name in ((short, "a.json"), (other, "b.json")):
        assert _receipt(repo, tmp_path / name) == 0
        ids.append(sorted(json.loads((tmp_path / name).read_text())["outcomes"]))
    assert ids[0] == ids[1]
    assert "tests/test_golden.py::test_file[{repo}/tests/cases/bold.html]" in ids[0]

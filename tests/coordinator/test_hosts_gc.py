"""`charpin-remote hosts gc` and the cap every run keeps by itself (#20 item 2), on the real
clean box: what it shows, what it frees, what it never frees, its exit codes."""

from __future__ import annotations

import json
import os
import site
import socket
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.remote.builtin import clean_cache_home
from charpin_runner.box.layout import cache_root

from tests.conftest import make_repo

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
_OUTER = (
    "import site; open(site.getsitepackages()[0] + '/outer.pth', 'w')"
    f".write({site.getsitepackages()[0]!r})"
)
SETUP = f'setup = [{json.dumps(f"python -c {chr(34)}{_OUTER}{chr(34)}")}]\n'


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "runner"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def _repo(tmp_path: Path, hosts_toml: str = "") -> Path:
    return make_repo(
        tmp_path / "repo",
        {
            "tests/test_a.py": "def test_a():\n    pass\n",
            "pyproject.toml": "[tool.charpin]\n" + SETUP + hosts_toml,
        },
    )


def _run(repo: Path, run_id: str) -> dict[str, Any]:
    out = repo.parent / "runs"
    main(["run", "--repo", str(repo), "--hosts", "clean", "--out", str(out), "--run-id", run_id,
          "--json", "-q", "--timeout", "300"])  # fmt: skip
    report = json.loads((out / run_id / "drift.json").read_text())
    assert report["not_evaluated"] == [], report["not_evaluated"]
    return dict(report)


def _gc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["hosts", "gc", "--json", *args])
    [host] = json.loads(capsys.readouterr().out)["hosts"]
    return code, dict(host)


def _on_disk(root: Path) -> int:
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def test_hosts_gc_shows_what_the_clean_box_keeps_then_frees_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = _repo(tmp_path)
    _run(repo, "r1")
    root = cache_root(str(clean_cache_home()))
    [venv] = (root / "venvs").iterdir()
    code, shown = _gc(capsys, "--repo", str(repo), "--dry-run")
    assert code == 0 and shown["ok"], shown
    report = shown["report"]
    assert report["dry_run"] and report["bytes_before"] == report["bytes_before"] > 0
    assert {(r["kind"], r["name"]) for r in report["removed"]} == set()  # under the default cap
    code, shown = _gc(capsys, "--repo", str(repo), "--dry-run", "--max-mb", "0")
    would = {(r["kind"], r["name"]) for r in shown["report"]["removed"]}
    assert ("venvs", venv.name) in would and venv.is_dir()
    code, freed = _gc(capsys, "--repo", str(repo), "--max-mb", "0")
    assert code == 0
    assert ("venvs", venv.name) in {(r["kind"], r["name"]) for r in freed["report"]["removed"]}
    assert not venv.exists()
    # What the collector runs from is in use while it runs: kept, and said so.
    assert [r["kind"] for r in freed["report"]["in_use"]] == ["runners"]
    assert freed["report"]["bytes_after"] < freed["report"]["bytes_before"]
    # The next run rebuilds what was freed.
    _run(repo, "r2")
    assert len(list((root / "venvs").iterdir())) == 1


def test_every_run_brings_the_box_back_under_its_cap(tmp_path: Path) -> None:
    # A venv is some 25 MB; 5 MB holds the cache repository and the runner folder only.
    repo = _repo(tmp_path, "[tool.charpin.hosts.clean]\ncache_max_mb = 5\n")
    report = _run(repo, "r1")
    assert report["boxes"][0]["interpretation"] == "ok"
    root = cache_root(str(clean_cache_home()))
    assert list((root / "venvs").iterdir()) == []  # used by the run, freed after it
    assert _on_disk(root) <= 5 * 1024 * 1024
    assert list((root / "runs").iterdir()) == []


def test_a_bad_cap_is_one_line_and_exit_64(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = _repo(tmp_path, "[tool.charpin.hosts.clean]\ncache_max_mb = -3\n")
    assert main(["hosts", "gc", "--repo", str(repo)]) == 64
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cache_max_mb must be a size in MB" in err, err
    assert main(["hosts", "gc", "--max-days", "-1"]) == 64
    assert "--max-days -1 must be 0 or more" in capsys.readouterr().err


def test_an_unreachable_box_is_exit_4_and_the_others_still_collected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "ssh_config"
    config.write_text(f"Host down\n    HostName 127.0.0.1\n    Port {port}\n")
    capsys.readouterr()
    code = main(["hosts", "gc", "--hosts", "down,clean", "--ssh-config", str(config)])
    out = capsys.readouterr().out
    assert code == 4, out
    assert "[down] BAD" in out and "connection refused" in out
    assert "[clean]" in out and "left" in out

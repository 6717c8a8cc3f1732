"""`charpin-remote verify` on a real OpenSSH box on loopback and the clean box at once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.remote.demo import build_demo_repo
from charpin_coordinator.remote.demo_cli import demo_patch

from tests.conftest import git
from tests.e2e.conftest import _require_sshd
from tests.sshd import SshdFactory

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "runner"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def test_a_rounding_patch_is_rejected_on_an_ssh_box_and_the_clean_box(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    box = sshd_factory(name="scratch", alias="scratch")
    repo = build_demo_repo(tmp_path / "invoice-export", stale=False).path
    toml = repo / "pyproject.toml"
    toml.write_text(
        toml.read_text() + f'\n[tool.charpin.hosts.scratch]\npython = "{sys.executable}"\n'
    )
    git(repo, "commit", "-qam", "a scratch box for verify")
    patch = tmp_path / "agent.diff"
    patch.write_bytes(demo_patch(repo))
    out = tmp_path / "verify"
    argv = ["verify", "--repo", str(repo), "--patch", str(patch), "--hosts", "scratch,clean"]
    argv += ["--ssh-config", str(box.ssh_config), "--out", str(out), "--run-id", "v1", "--json"]
    code = main(argv)
    report = json.loads((out / "v1" / "verify.json").read_text())
    assert report["verdict"] == "REJECT" and code & 2
    assert [b["label"] for b in report["boxes"]] == ["scratch", "clean"]
    assert {g["box"] for g in report["gates"] if g["gate"] == "Behaviour"} == {"scratch", "clean"}
    receipt = json.loads((out / "v1" / "patched" / "scratch" / "receipt.json").read_text())
    assert receipt["identity"]["patch_sha256"] == report["patch_sha256"]
    assert receipt["environment"]["sandbox"] in ("bwrap-confined", "none")
    base = json.loads((out / "v1" / "base" / "scratch" / "receipt.json").read_text())
    assert base["identity"]["head_before"] == report["base"]
    assert not list((box.root / ".cache" / "charpin" / "runs").iterdir())


PROVISION = f"{sys.executable} {ROOT / 'deploy' / 'provision-loopback-sshd'}"
DISPOSE = f"{sys.executable} {ROOT / 'deploy' / 'dispose-loopback-sshd'}"


def test_verify_on_a_disposable_server_disposes_each_server_once(tmp_path: Path) -> None:
    _require_sshd()  # fails instead of skipping under CHARPIN_REQUIRE_SSH=1 (CI)
    repo = build_demo_repo(tmp_path / "invoice-export", stale=False).path
    count = tmp_path / "disposed"
    dispose = f"echo $CHARPIN_HOST_ID >> {count} && {DISPOSE}"
    toml = repo / "pyproject.toml"
    toml.write_text(
        toml.read_text()
        + f"\n[tool.charpin.hosts.scratch]\npython = {json.dumps(sys.executable)}\n"
        + f"provision = [{json.dumps(PROVISION)}]\ndispose = [{json.dumps(dispose)}]\n"
    )
    git(repo, "commit", "-qam", "a disposable box for verify")
    patch = tmp_path / "agent.diff"
    patch.write_bytes(demo_patch(repo))
    out = tmp_path / "verify"
    argv = ["verify", "--repo", str(repo), "--patch", str(patch), "--hosts", "scratch"]
    code = main([*argv, "--out", str(out), "--run-id", "v1", "--json"])
    report = json.loads((out / "v1" / "verify.json").read_text())
    assert report["verdict"] == "REJECT" and code & 2 and not code & 4
    assert [b["label"] for b in report["boxes"]] == ["scratch"]
    servers = count.read_text().split()
    assert len(servers) == 2 and len(set(servers)) == 2  # one server per run, each disposed once
    assert not any(Path(s).exists() for s in servers)

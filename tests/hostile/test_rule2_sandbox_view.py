"""Rule 2: deny by default, the sandbox shows only what the run needs.

The attack from the field: the confined sandbox bound `/` read-only, so an agent's test read the
reviewer's `~/.ssh/id_ed25519`, used it as parametrize ids, and it landed in the PR comment, the
JSON and the evidence bundle. The view is now an allow-list, so the same test finds nothing;
the siblings nobody listed (cloud credentials, a token file under ~/.config, charpin's own
reuse key, /etc/shadow, an ssh host key) are not there either, on every kind of box, in `verify`
and in `charpin pins check` run by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main

from tests.conftest import git, make_repo
from tests.hostile.harness import (
    BOX_KINDS,
    SAY_TOML,
    host_for,
    repo_with,
    require_bwrap,
    run,
    said,
)

CANARY = "-----BEGIN OPENSSH PRIVATE KEY-----CANARY7f3a9c1e5b"
# Each test of the thief reads one path and says what it got; a readable secret would also
# become a test id (parametrize) and so travel into every report.
THIEF = """
import pathlib
import pytest

PATHS = {paths!r}


def _read(path):
    try:
        return pathlib.Path(path).read_text(errors="replace")[:200]
    except OSError as exc:
        return "unreadable: " + type(exc).__name__


STOLEN = [_read(p) for p in PATHS]


@pytest.mark.parametrize("secret", STOLEN)
def test_steals(secret):
    print("ATTEMPT " + repr(secret), flush=True)
"""


def _secrets(root: Path) -> list[str]:
    """A reviewer's home with the usual secrets in it, at absolute paths the thief knows."""
    home = root / "reviewer"
    places = {
        ".ssh/id_ed25519": CANARY,
        ".aws/credentials": "[default]\naws_secret_access_key = " + CANARY,
        ".config/gh/hosts.yml": "oauth_token: " + CANARY,
        ".netrc": "machine example.invalid password " + CANARY,
    }
    for rel, text in places.items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return [str(home / rel) for rel in places]


def _machine_secrets() -> list[str]:
    found = ["/etc/shadow", "/etc/ssh/ssh_host_ed25519_key"]
    state = os.environ.get("XDG_STATE_HOME")
    if state:
        found.append(os.path.join(state, "charpin", "reuse.key"))
    return found


def _nothing_leaked(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), f"the canary reached {path}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", BOX_KINDS)
def test_the_tests_find_no_secret_of_this_machine(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    require_bwrap()
    paths = _secrets(tmp_path) + _machine_secrets()
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    repo = repo_with(
        tmp_path / "repo", {"tests/test_thief.py": THIEF.format(paths=paths)}, boxes, SAY_TOML
    )
    _, report, folder = run(repo, hosts, ssh_config=ssh_config)
    assert report["not_evaluated"] == [], report["not_evaluated"]
    got = said(folder, hosts).splitlines()
    assert len(got) == len(paths), got
    assert all("unreadable" in line for line in got), got
    _nothing_leaked(folder)


@pytest.mark.slow
def test_an_agents_test_in_verify_reads_no_key_and_none_reaches_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_bwrap()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    paths = _secrets(tmp_path) + _machine_secrets()
    repo = repo_with(tmp_path / "repo", {"tests/test_ok.py": "def test_ok():\n    pass\n"})
    (repo / "tests/test_thief.py").write_text(THIEF.format(paths=paths))
    git(repo, "add", "-A")
    patch = subprocess.run(
        ["git", "-C", str(repo), "diff", "--cached", "--binary"], capture_output=True, check=True
    ).stdout
    git(repo, "reset", "-q", "--hard", "HEAD")
    (tmp_path / "agent.diff").write_bytes(patch)
    out = tmp_path / "verify"
    argv = ["verify", "--repo", str(repo), "--patch", str(tmp_path / "agent.diff")]
    argv += ["--out", str(out), "--run-id", "v1", "--json", "--timeout", "120"]
    argv += ["--markdown", str(tmp_path / "verdict.md"), "--bundle", str(tmp_path / "ev.tar")]
    main(argv)
    _nothing_leaked(out)
    for artefact in (tmp_path / "verdict.md", tmp_path / "ev.tar"):
        assert CANARY.encode() not in artefact.read_bytes(), artefact
    for side in ("base", "patched"):
        receipt = json.loads((out / "v1" / side / "clean" / "receipt.json").read_text())
        assert receipt["environment"]["sandbox"] == "bwrap-confined", side


@pytest.mark.slow
def test_pins_checked_by_hand_run_in_the_sandbox_too(tmp_path: Path) -> None:
    """`charpin pins check` on a laptop: the pin target is the code under test as well."""
    require_bwrap()
    paths = _secrets(tmp_path)
    script = (
        "import pathlib, sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        print(pathlib.Path(path).read_text()[:40])\n"
        "    except OSError as exc:\n"
        "        print('unreadable', type(exc).__name__)\n"
    )
    repo = make_repo(tmp_path / "repo", {"tool.py": script})
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "runner"))
    charpin = [sys.executable, "-m", "charpin_runner", "pins"]
    recorded = subprocess.run(
        [*charpin, "record", "--id", "thief", "--", "tool.py", *paths],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert recorded.returncode == 0, recorded.stderr
    golden = (repo / "pins.jsonl").read_text()
    assert CANARY not in golden, "pins record ran the target outside the sandbox"
    assert "unreadable" in golden or "unreadable" in json.dumps(golden)


STEAL = """import pathlib, sys
found = []
for path in sys.argv[1:]:
    try:
        found.append(pathlib.Path(path).read_text(errors="replace")[:60])
    except OSError:
        pass
print("stole", len(found))
sys.exit(3 if found else 0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["clean", "ssh"])
def test_setup_and_prepare_lines_find_no_secret_either(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    """The commit's build code (a setup.py, a build backend, a prepare line) runs before its
    tests, with the network: it sees the same allow-list view, never the user's home or keys.
    Without the sandbox the same lines find the secrets, so the box is not evaluated."""
    require_bwrap()
    paths = _secrets(tmp_path) + _machine_secrets()
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    args = " ".join(json.dumps(p) for p in paths)
    toml = (
        "[tool.charpin]\n"
        f"setup = [{json.dumps('python steal.py ' + args)}, \"python -m pip install -q pytest\"]\n"
        f"prepare = [{json.dumps('python steal.py ' + args)}]\n"
    )
    repo = repo_with(
        tmp_path / "repo",
        {"steal.py": STEAL, "tests/test_ok.py": "def test_ok():\n    pass\n"},
        boxes,
        toml,
    )
    _, report, folder = run(repo, hosts, ssh_config=ssh_config)
    assert report["not_evaluated"] == [], report["not_evaluated"]
    _nothing_leaked(folder)
    if kind == "clean":
        _, report, _ = run(repo, hosts, "--sandbox", "off", run_id="r2")
        [missing] = report["not_evaluated"]
        assert missing["kind"] == "setup-failed" and "exited 3" in missing["reason"], missing

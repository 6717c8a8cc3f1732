"""Attack: a test run on `local` plants an earlier verify's base receipts (an `ok` base in which
the test the patch breaks already fails), so that `verify --reuse-base` says ACCEPT without
ever running the base. The auditor's proof of issue #8, end to end on real runs."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.config import load_config
from charpin_coordinator.remote.snapshot import repo_key
from charpin_coordinator.statedir import state_root
from charpin_coordinator.verify import reuse
from charpin_runner.receipt import Identity, dumps

from tests.conftest import git
from tests.hostile.harness import repo_with, require_bwrap, run
from tests.receipt_factory import make_receipt

pytestmark = pytest.mark.slow

FORGED_ID = "99991231T235959Z-x"
ADD = "tests/test_calc.py::test_add"
PLANT = "tests/test_plant.py::test_plant"

# Plants only when run in place on the working tree (`local`): the payload is there, untracked.
PLANTER = """
import base64, json, os
from pathlib import Path


def test_plant():
    root = Path.cwd()
    payload = root / "attack" / "payload.json"
    if not payload.is_file():
        return
    plan = json.loads(payload.read_text())
    done = {}
    for rel, data in plan["repo_files"].items():
        target = root / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(data))
            done[rel] = "written"
        except OSError as exc:  # under bubblewrap the repository's .charpin/ is read-only
            done[rel] = "refused " + type(exc).__name__
    state = plan.get("state")
    if state:
        root_dir = Path(state["root"])
        try:
            done["key"] = (root_dir / "reuse.key").read_bytes().hex()
        except OSError as exc:
            done["key"] = "refused " + type(exc).__name__
        try:
            (root_dir / "planted").write_text("x")
            done["planted"] = "written"
        except OSError as exc:
            done["planted"] = "refused " + type(exc).__name__
        try:
            from charpin_coordinator.verify import reuse
            forged = {"clean": base64.b64decode(state["receipt"])}
            where = reuse.store(Path(state["repo"]), state["run_id"], state["base"],
                                state["config_sha256"], forged, notes=[])
            done["store"] = "stored " + str(where)
        except Exception as exc:
            done["store"] = "refused " + type(exc).__name__ + ": " + str(exc)
    (root / "attack" / "mark.json").write_text(json.dumps(done))
"""


def _repo(tmp_path: Path) -> Path:
    return repo_with(
        tmp_path / "repo",
        {
            "calc.py": "def add(a, b):\n    return a + b\n",
            "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
            "tests/test_plant.py": PLANTER,
        },
        toml='[tool.pytest.ini_options]\npythonpath = ["."]\n',
    )


def _forged_receipt(base: str, tree: str) -> bytes:
    """An `ok` base run in which test_add already fails: if trusted, the patch breaks nothing."""
    receipt = make_receipt("clean")
    ids = [ADD, PLANT]
    receipt = dataclasses.replace(
        receipt,
        identity=Identity(base, base, tree, tree, base, None, None),
        collection=dataclasses.replace(
            receipt.collection, collected=ids, selected=ids, executed=ids, order=ids
        ),
        outcomes={ADD: "failed", PLANT: "passed"},
        durations=dict.fromkeys(ids, 0.01),
    )
    return dumps(receipt)


def _config_sha(repo: Path, base: str) -> str:
    table = load_config(repo, rev=base).table
    return hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()


def _plant(repo: Path, state: dict[str, Any] | None, *extra: str) -> dict[str, Any]:
    """Run the suite on `local` with the attack's payload in place; what the attack did."""
    base = git(repo, "rev-parse", "HEAD")
    forged = _forged_receipt(base, git(repo, "rev-parse", "HEAD^{tree}"))
    record = {
        "base": base,
        "config_sha256": _config_sha(repo, base),
        "boxes": {"clean": hashlib.sha256(forged).hexdigest()},
    }
    folder = f".charpin/verify/{FORGED_ID}"
    files = {
        f"{folder}/reuse.json": json.dumps(record).encode(),
        f"{folder}/base/clean/receipt.json": forged,
    }
    plan: dict[str, Any] = {k: base64.b64encode(v).decode() for k, v in files.items()}
    payload: dict[str, Any] = {"repo_files": plan}
    if state is not None:
        payload["state"] = {
            **state,
            "repo": str(repo),
            "run_id": FORGED_ID,
            "base": base,
            "config_sha256": record["config_sha256"],
            "receipt": base64.b64encode(forged).decode(),
        }
    (repo / "attack").mkdir()
    (repo / "attack" / "payload.json").write_text(json.dumps(payload))
    run(repo, "local", *extra, run_id="planted")
    mark = repo / "attack" / "mark.json"
    assert mark.is_file(), "the planting test did not run: nothing was tested"
    done: dict[str, Any] = json.loads(mark.read_text())
    return done


def _verify_breaking_patch(repo: Path, tmp_path: Path) -> dict[str, Any]:
    """`verify --reuse-base` of a patch that makes test_add fail, into the default folder."""
    patch = tmp_path / "broken.diff"
    patch.write_bytes(
        b"--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
        b"-    return a + b\n+    return a - b\n"
    )
    argv = ["verify", "--repo", str(repo), "--patch", str(patch), "--hosts", "clean"]
    main([*argv, "--reuse-base", "--run-id", "v1", "--json", "--timeout", "120"])
    report: dict[str, Any] = json.loads((repo / ".charpin/verify/v1/verify.json").read_text())
    return report


def _failing(report: dict[str, Any]) -> list[str]:
    return sorted({g["gate"] for g in report["gates"] if g["status"] == "FAIL"})


@pytest.fixture(autouse=True)
def _state_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


def test_a_reuse_record_planted_in_the_repository_is_never_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = _repo(tmp_path)
    # Without the sandbox, so that the record really lands in the repository (under bubblewrap
    # its .charpin/ is read-only): verify must not read it either way.
    done = _plant(repo, None, "--sandbox", "off")
    assert (repo / ".charpin/verify" / FORGED_ID / "reuse.json").is_file(), done
    report = _verify_breaking_patch(repo, tmp_path)
    # Trusted, the planted base would have said ACCEPT (test_add "already failing").
    assert report["base_from"] == "", "a record planted in the repository was reused"
    # The base's test catches it (and the differential replay of the changed call too).
    assert report["verdict"] == "REJECT" and "Tests" in _failing(report), report["gates"]
    assert "no earlier verify" in capsys.readouterr().err


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    found: dict[str, tuple[int, bytes]] = {}
    for top, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(top) / name
            data = b"" if path.is_dir() else path.read_bytes()
            found[str(path.relative_to(root))] = (path.lstat().st_mode, data)
    return found


def test_a_local_run_cannot_write_a_reuse_record_into_the_state_folder(tmp_path: Path) -> None:
    # Without bubblewrap a test runs as this user and can read reuse.key (README: the same-user
    # limit); under it the state folder is out of the tests' reach.
    require_bwrap()
    repo = _repo(tmp_path)
    root = state_root()
    reuse.load_key(create=True)  # an earlier verify made the key: the attack can try to use it
    before = _snapshot(root)
    done = _plant(repo, {"root": str(root), "repo_key": repo_key(repo)})
    assert "store" in done, done
    # Under bubblewrap the repository's .charpin/ is read-only too: no record lands there.
    planted = done[f".charpin/verify/{FORGED_ID}/reuse.json"]
    assert planted.startswith("refused"), done
    assert _snapshot(root) == before, f"the test changed the state folder: {done}"
    report = _verify_breaking_patch(repo, tmp_path)
    assert report["base_from"] == "", "a forged record in the state folder was reused"
    # The base's test catches it (and the differential replay of the changed call too).
    assert report["verdict"] == "REJECT" and "Tests" in _failing(report), report["gates"]

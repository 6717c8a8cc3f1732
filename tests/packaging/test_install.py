"""charpin-remote as a new user gets it: the built wheels installed with the declared dependency
floors (.ci/constraints-floors.txt) into a venv outside any repository, `charpin-remote demo`
run from an empty folder, then a real SSH preflight (fabric, paramiko) and a coloured report
(rich) from that venv. The floors are the lowest versions that work; this proves they do."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.packaging.build import FLOORS, ROOT, build, make_venv, pip_install
from tests.sshd import SSHD, start_sshd

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed() -> Iterator[Path]:
    """bin/ of a venv outside the repository with the wheel, the floors and pytest."""
    with tempfile.TemporaryDirectory(prefix="charpin-install-") as tmp:
        base = Path(tmp)
        assert ROOT not in base.parents
        wheel = build("wheel", ROOT, base / "dist")
        bin_dir = make_venv(base / "venv")
        pip_install(bin_dir, "-c", str(FLOORS), str(wheel), "pytest")
        yield bin_dir


def _env(home: Path, bin_dir: Path) -> dict[str, str]:
    """This environment without the checkout's Python settings, the venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_STATE_HOME=str(home / "state"),
        PATH=f"{bin_dir}:{env.get('PATH', '')}",
    )
    return env


def test_the_floors_are_what_got_installed(installed: Path) -> None:
    done = subprocess.run(
        [str(installed / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    versions = {p["name"].lower(): p["version"] for p in json.loads(done.stdout)}
    for line in FLOORS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            assert versions[name] == version, name


def test_demo_runs_from_an_empty_folder(installed: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(
        [str(installed / "charpin-remote"), "demo", "--keep", "--dir", str(tmp_path)],
        cwd=empty,
        capture_output=True,
        text=True,
        env=_env(tmp_path, installed),
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    assert "The verdict is REJECT" in done.stdout
    assert list(empty.iterdir()) == []  # nothing written where it was run
    # rich at its floor: the kept run's receipts as a coloured report.
    kept = re.search(r"kept the example repository: (.+)", done.stdout)
    assert kept is not None
    receipts = sorted(Path(kept.group(1)).glob(".charpin/runs/*/*/receipt.json"))
    assert len(receipts) >= 2
    shown = subprocess.run(
        [str(installed / "charpin-remote"), "compare", "--color", "always", *map(str, receipts)],
        capture_output=True,
        text=True,
        env={**_env(tmp_path, installed), "COLUMNS": "100"},
        timeout=120,
        check=False,
    )
    assert "\x1b[" in shown.stdout and "Traceback" not in shown.stderr, shown.stderr


def test_ssh_preflight_with_the_floors(installed: Path, tmp_path: Path) -> None:
    if not SSHD.exists():
        if os.environ.get("CHARPIN_REQUIRE_SSH") == "1":
            pytest.fail(f"CHARPIN_REQUIRE_SSH=1 but {SSHD} is missing")
        pytest.skip(f"{SSHD} is not installed")
    base = tmp_path / "sshd"
    base.mkdir(mode=0o700)
    box = start_sshd(base, name="floor")
    try:
        done = subprocess.run(
            [str(installed / "charpin-remote"), "hosts", "check", "--hosts", "floor",
             "--ssh-config", str(box.ssh_config), "--json", "--repo", str(tmp_path)],
            capture_output=True,
            text=True,
            env=_env(tmp_path, installed),
            timeout=120,
            check=False,
        )  # fmt: skip
    finally:
        box.stop()
    # A floor that warns on every start (paramiko 3.4.0 with a new cryptography) is not a floor.
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr, done.stderr
    [host] = json.loads(done.stdout)["hosts"]
    reach = host["checks"][0]
    assert (reach["name"], reach["ok"]) == ("reach", True), host
    assert host["host_key_fingerprint"] == box.fingerprint

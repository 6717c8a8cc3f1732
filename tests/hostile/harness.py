"""Helpers for the hostile corpus: a repository with an attacking test, run on real boxes."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main

from tests.conftest import make_repo
from tests.sshd import SshBox

BOX_KINDS = ["local", "clean", "ssh"]


def repo_with(
    root: Path, files: dict[str, str], boxes: Sequence[SshBox] = (), toml: str = ""
) -> Path:
    """A committed repository; SSH boxes use this interpreter (it has pytest) as their python."""
    hosts = "".join(
        f'[tool.charpin.hosts.{json.dumps(b.alias)}]\npython = "{sys.executable}"\n' for b in boxes
    )
    return make_repo(root, {"tests/__init__.py": "", "pyproject.toml": toml + hosts, **files})


def run(
    repo: Path, hosts: str, *extra: str, ssh_config: Path | None = None, run_id: str = "r1"
) -> tuple[int, dict[str, Any], Path]:
    """`charpin-remote run` for real; (exit code, drift.json, run folder)."""
    out = repo.parent / "runs"
    argv = ["run", "--repo", str(repo), "--hosts", hosts, "--out", str(out), "--run-id", run_id]
    argv += ["--json", "--timeout", "120", *extra]
    if ssh_config is not None:
        argv += ["--ssh-config", str(ssh_config)]
    code = main(argv)
    folder = out / run_id
    return code, json.loads((folder / "drift.json").read_text()), folder


# An attacking test reports what it managed on stdout, which reaches the run folder as the box's
# stdout.log: under the sandbox's allow-list view no file outside its checkout is there to
# write. These settings keep pytest from capturing it.
SAY_TOML = '[tool.charpin]\npytest_args = ["-s"]\n'


def said(folder: Path, box: str) -> str:
    """Everything the attacking tests printed as `ATTEMPT ...` on that box, one line each."""
    text = (folder / box / "stdout.log").read_text(errors="replace")
    # pytest -s prints a test's output right after the file's name, on the same line.
    return "\n".join(ln.split("ATTEMPT ", 1)[1] for ln in text.splitlines() if "ATTEMPT " in ln)


def not_evaluated(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {n["label"]: n for n in report["not_evaluated"]}


def gate(report: dict[str, Any], name: str, box: str) -> str:
    for row in report["gates"]:
        if row["gate"] == name and row["box"] == box:
            return str(row["status"])
    raise AssertionError(f"no {name} gate for {box}")


def host_for(kind: str, sshd_factory: Any, tmp_path: Path) -> tuple[str, list[SshBox], Path | None]:
    """(hosts value, sshd boxes, ssh_config) for one box kind of the corpus."""
    if kind != "ssh":
        return kind, [], None
    box = sshd_factory(name="box", alias="box")
    config = tmp_path / "ssh_config"
    config.write_text(box.ssh_config.read_text())
    return "box", [box], config


def require_bwrap() -> None:
    """Skip where bubblewrap cannot run, unless CI demands it (CHARPIN_REQUIRE_SANDBOX=1)."""
    from charpin_runner.sandbox import bwrap_works

    if not bwrap_works():
        if os.environ.get("CHARPIN_REQUIRE_SANDBOX") == "1":
            pytest.fail("CHARPIN_REQUIRE_SANDBOX=1 but bubblewrap is not usable here")
        pytest.skip("bubblewrap is not usable here (apt-get install bubblewrap)")

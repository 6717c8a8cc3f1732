"""Coordinator side; reaches boxes through Transport (the SSH stack loads only in check_hosts).

Preflight for `charpin-remote hosts check`: can we reach the box, is its host key known, does
its Python (3.9 or newer) start the box agent, does it have venv and ensurepip, git, and free
disk in its home folder. The agent's `probe` step answers all of it in one round trip. Returns
data; the CLI prints it. Every problem says what to install or change.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from charpin_coordinator.remote.builtin import clean_cache_home
from charpin_coordinator.remote.bundle import runner_bundle
from charpin_coordinator.remote.errors import BoxError
from charpin_coordinator.remote.hosts import HostSpec
from charpin_coordinator.remote.session import BoxSession, shipped_agent
from charpin_coordinator.remote.transport import LocalTransport, Transport

MIN_FREE_MB: Final = 200
CHECK_TIMEOUT: Final = 30.0


@dataclass(frozen=True)
class CheckItem:
    """One preflight item: what, whether it is fine, and the message to show."""

    name: str
    ok: bool
    message: str


@dataclass
class HostCheck:
    """The preflight result for one box."""

    host: str
    items: list[CheckItem] = field(default_factory=list)
    host_key_fingerprint: str | None = None
    host_key_accepted_new: bool = False
    error_kind: str | None = None  # BoxError.kind when the box could not be reached

    @property
    def ok(self) -> bool:
        """True when every item is fine."""
        return bool(self.items) and all(item.ok for item in self.items)


def check_host(
    transport: Transport,
    *,
    python: str | None = None,
    timeout: float = CHECK_TIMEOUT,
    needs_pytest: bool = False,
) -> HostCheck:
    """Check one connected box through its agent (which this starts, placing the runner in the
    box's cache as a run would); raises BoxError only if the connection itself is lost.

    needs_pytest: the box has no setup commands, so `run` will use its Python as it is.
    """
    name = transport.name
    result = HostCheck(host=name)
    fp = transport.host_key_fingerprint
    result.host_key_fingerprint = fp
    result.host_key_accepted_new = transport.host_key_accepted_new
    reach = "reachable" + (f"; host key {fp}" if fp else "")
    if result.host_key_accepted_new:
        reach += " (accepted now and added to known_hosts)"
    result.items.append(CheckItem("reach", True, reach))
    python = python or "python3"
    try:
        session = BoxSession.start(
            transport,
            shipped_agent(python, transport.home, runner_bundle()),
            python=python,
            runner=runner_bundle(),
            timeout=timeout,
        )
    except BoxError as exc:
        if exc.kind in ("disconnected", "timeout"):
            raise
        result.items.append(CheckItem("python", False, str(exc)))
        return result
    try:
        info, _ = session.call("probe", timeout=timeout)
    finally:
        session.close()
    result.items.extend(_python_items(info, name, python, needs_pytest=needs_pytest))
    result.items.append(_git_item(info, name))
    result.items.append(_disk_item(info, name))
    return result


def _python_items(
    info: dict[str, Any], name: str, python: str, *, needs_pytest: bool
) -> list[CheckItem]:
    shown = ".".join(str(v) for v in info.get("version", []))
    items = [CheckItem("python", True, f"{python} {shown}")]
    for module, package in (("venv", "python3-venv"), ("ensurepip", "python3-venv")):
        if info.get(module):
            items.append(CheckItem(module, True, f"{module} imports"))
        else:
            items.append(
                CheckItem(
                    module,
                    False,
                    f"{python} on {name} lacks the {module} module: install {package}",
                )
            )
    if needs_pytest:
        items.append(_pytest_item(info, python, name))
    return items


def _pytest_item(info: dict[str, Any], python: str, name: str) -> CheckItem:
    """Without setup commands `run` uses the box's Python as it is, so it must import pytest."""
    if info.get("pytest"):
        return CheckItem("pytest", True, "pytest imports (no setup commands for this box)")
    return CheckItem(
        "pytest",
        False,
        f"{python} on {name} cannot import pytest and no setup commands are configured for it: "
        'add setup = ["pip install pytest"] to [tool.charpin] (or the host\'s table) or install '
        "pytest for that python",
    )


def _git_item(info: dict[str, Any], name: str) -> CheckItem:
    text = str(info.get("git") or "")
    if not text.startswith("git version"):
        return CheckItem("git", False, f"git is missing on {name}: install git")
    return CheckItem("git", True, text)


def _disk_item(info: dict[str, Any], name: str) -> CheckItem:
    home, free_mb = str(info.get("home")), int(info.get("free_mb") or 0)
    if free_mb < MIN_FREE_MB:
        return CheckItem(
            "disk",
            False,
            f"only {free_mb} MB free in {home} on {name}; free at least {MIN_FREE_MB} MB",
        )
    return CheckItem("disk", True, f"{free_mb} MB free in {home}")


def check_hosts(
    specs: Sequence[HostSpec],
    *,
    accept_new: bool = False,
    connect_timeout: float = 10.0,
    default_setup: Sequence[str] = (),
) -> list[HostCheck]:
    """Check each box in order; an unreachable box is a failed result, never an exception.

    default_setup: the repository's [tool.charpin] setup, used by boxes without their own.
    """
    results = []
    for spec in specs:
        python = spec.extras.python
        setup = default_setup if spec.extras.setup is None else spec.extras.setup
        if spec.builtin:
            # As `run` does: both built-in boxes use this interpreter unless told otherwise,
            # and `local` never runs setup commands.
            needs = spec.name == "local" or not setup
            with tempfile.TemporaryDirectory(prefix="charpin-check-") as tmp:
                local = LocalTransport(spec.name, Path(tmp), home=str(clean_cache_home()))
                results.append(
                    check_host(local, python=python or sys.executable, needs_pytest=needs)
                )
            continue
        if spec.extras.provision:
            # Made by its provision commands for each run: nothing exists yet to check.
            note = "a disposable server, made for each run by its provision commands"
            results.append(HostCheck(host=spec.name, items=[CheckItem("provision", True, note)]))
            continue
        # imported here so `hosts check` on built-in boxes never needs the SSH stack
        from charpin_coordinator.remote.ssh import open_box

        try:
            with open_box(spec, accept_new=accept_new, connect_timeout=connect_timeout) as box:
                results.append(check_host(box, python=python, needs_pytest=not setup))
        except BoxError as exc:
            results.append(
                HostCheck(
                    host=spec.name,
                    items=[CheckItem("reach", False, str(exc))],
                    error_kind=exc.kind,
                )
            )
    return results

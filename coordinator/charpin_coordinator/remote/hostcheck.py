"""Coordinator side; reaches boxes through Transport (the SSH stack loads only in check_hosts).

Preflight for `charpin-remote hosts check`: can we reach the box, is its host key known, does it
have a Python >= 3.9 with venv and ensurepip, git, and free disk in its home folder. Returns data;
the CLI prints it. Every problem says what to install or change.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from charpin_coordinator.remote.hosts import BoxError, HostSpec
from charpin_coordinator.remote.transport import LocalTransport, Transport

MIN_PYTHON: Final = (3, 9)
MIN_FREE_MB: Final = 200
CHECK_TIMEOUT: Final = 30.0

# One round trip for everything Python: version, and whether venv and ensurepip import.
_PY_PROBE: Final = (
    "import importlib.util, json, sys\n"
    "out = {'version': list(sys.version_info[:3]), 'executable': sys.executable}\n"
    "out['pytest'] = importlib.util.find_spec('pytest') is not None\n"
    "for mod in ('venv', 'ensurepip'):\n"
    "    try:\n"
    "        __import__(mod)\n"
    "        out[mod] = True\n"
    "    except Exception:\n"
    "        out[mod] = False\n"
    "print(json.dumps(out))\n"
)


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
    """Check one connected box; raises BoxError only if the connection itself is lost.

    needs_pytest: the box has no setup commands, so `run` will use its Python as it is.
    """
    name = transport.name
    result = HostCheck(host=name)
    fp = getattr(transport, "host_key_fingerprint", None)
    result.host_key_fingerprint = fp
    result.host_key_accepted_new = bool(getattr(transport, "host_key_accepted_new", False))
    reach = "reachable" + (f"; host key {fp}" if fp else "")
    if result.host_key_accepted_new:
        reach += " (accepted now and added to known_hosts)"
    result.items.append(CheckItem("reach", True, reach))
    result.items.extend(
        _python_items(transport, name, python or "python3", timeout, needs_pytest=needs_pytest)
    )
    result.items.append(_git_item(transport, name, timeout))
    result.items.append(_disk_item(transport, name, timeout))
    return result


def _python_items(
    transport: Transport, name: str, python: str, timeout: float, *, needs_pytest: bool
) -> list[CheckItem]:
    done = transport.run([python, "-c", _PY_PROBE], timeout=timeout)
    if done.timed_out or done.returncode != 0:
        if done.returncode == 127 or b"not found" in done.stderr:
            hint = "install python3 (3.9 or newer)"
        else:
            hint = "check that it starts"
        return [CheckItem("python", False, f"{python} on {name} does not run: {hint}")]
    try:
        info = json.loads(done.stdout)
        version = tuple(int(v) for v in info["version"])
    except (ValueError, KeyError, TypeError):
        return [CheckItem("python", False, f"{python} on {name} gave unreadable output")]
    shown = ".".join(str(v) for v in version)
    items = []
    if version[:2] < MIN_PYTHON:
        items.append(
            CheckItem(
                "python",
                False,
                f"{python} on {name} is {shown}; charpin needs 3.9 or newer: install a newer "
                "python3 or set python = ... under [tool.charpin.hosts]",
            )
        )
    else:
        items.append(CheckItem("python", True, f"{python} {shown}"))
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


def _pytest_item(info: dict[str, object], python: str, name: str) -> CheckItem:
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


def _git_item(transport: Transport, name: str, timeout: float) -> CheckItem:
    done = transport.run(["git", "--version"], timeout=timeout)
    text = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0 or not text.startswith("git version"):
        return CheckItem("git", False, f"git is missing on {name}: install git")
    return CheckItem("git", True, text)


def _disk_item(transport: Transport, name: str, timeout: float) -> CheckItem:
    home = transport.home()
    done = transport.run(["df", "-Pk", home], timeout=timeout)
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    try:
        available_kb = int(lines[-1].split()[3])
    except (IndexError, ValueError):
        return CheckItem("disk", False, f"could not read free disk space of {home} on {name}")
    free_mb = available_kb // 1024
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
                local = LocalTransport(spec.name, Path(tmp))
                results.append(
                    check_host(local, python=python or sys.executable, needs_pytest=needs)
                )
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

"""Fixtures for end-to-end tests against real OpenSSH sshd processes on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sshd import SSHD, SshBox, SshdFactory, start_sshd

_BOXES = pytest.StashKey[list[SshBox]]()


def _require_sshd() -> None:
    if SSHD.exists():
        return
    reason = f"{SSHD} is not installed (apt-get install openssh-server)"
    if os.environ.get("CHARPIN_REQUIRE_SSH") == "1":
        pytest.fail(f"CHARPIN_REQUIRE_SSH=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture
def sshd_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SshdFactory]:
    """Start sshd boxes on demand: sshd_factory(name=, alias=, set_env=, localtime=, ...)."""
    _require_sshd()
    base = tmp_path_factory.mktemp("sshd")
    base.chmod(0o700)
    boxes: list[SshBox] = []
    request.node.stash[_BOXES] = boxes

    def factory(**kwargs: Any) -> SshBox:
        kwargs.setdefault("name", f"box{len(boxes) + 1}")
        box = start_sshd(base, **kwargs)
        boxes.append(box)
        return box

    yield factory
    for box in boxes:
        box.stop()


@pytest.fixture
def ssh_box(sshd_factory: SshdFactory) -> SshBox:
    """One running sshd box with a pinned known_hosts line and an ssh_config alias."""
    return sshd_factory(name="box", alias="box")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Show every box's sshd -e log under a failing test."""
    report = yield
    if report.failed:
        for box in item.stash.get(_BOXES, []):
            report.sections.append((f"sshd -e log of {box.name}", box.log()))
    return report

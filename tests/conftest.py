"""Shared test fixtures: environment hygiene and small builders (real git repos, real processes)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Test data is not this suite's tests: tests/data/inflection-0.5.1/test_inflection.py is a
# vendored library's own test file, run only inside the repositories the tests build from it.
collect_ignore = ["data"]

# Variables that must never leak into what tests run (agent sockets, proxies, user ssh config).
# CI is scrubbed too: CI runs the suite with CI=true; tests of the CI refusal set it themselves.
_SCRUB = (
    "CI",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
)


@pytest.fixture(autouse=True)
def _clean_environ(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    # The coordinator's state folder (verify's reuse records and key): never the real home's.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-state"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "charpin test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@charpin.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "charpin test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@charpin.invalid")
    yield


def git(repo: Path, *args: str) -> str:
    """Run git in repo and return stdout (raises on failure)."""
    out = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def make_repo(root: Path, files: dict[str, str]) -> Path:
    """Create a real git repository at root with files committed; return root."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A small real repository with one passing test and one fixture file."""
    return make_repo(
        tmp_path / "repo",
        {
            "tests/__init__.py": "",
            "tests/fixtures/rates.json": '{"vat": "0.20"}\n',
            "tests/test_rates.py": (
                "import json, pathlib\n"
                "def test_vat():\n"
                "    p = pathlib.Path(__file__).parent / 'fixtures' / 'rates.json'\n"
                "    assert json.loads(p.read_text())['vat'] == '0.20'\n"
            ),
        },
    )


os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")


def run_on(
    box: Any, argv: list[str], *, timeout: float = 10.0, stdin: bytes = b""
) -> tuple[int | None, bytes, bytes]:
    """Run argv on a Transport's channel: (exit status, all of stdout, stderr's kept end).

    stdin is sent whole before reading; commands that need its end should read a fixed
    length (`head -c N`), since a channel's stdin closes only when it finishes."""
    channel = box.open(argv)
    if stdin:
        channel.send(stdin)
    out = bytearray()
    ends = time.monotonic() + timeout
    while True:
        data = channel.recv(65536, max(0.0, ends - time.monotonic()))
        if data is None:
            finished = channel.finish(1.0)
            raise TimeoutError(f"{argv!r} still running after {timeout}s: {finished.stderr!r}")
        if not data:
            break
        out += data
    finished = channel.finish(timeout)
    return finished.status, bytes(out), finished.stderr

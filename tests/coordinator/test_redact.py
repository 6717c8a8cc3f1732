"""Secrets of the coordinator's environment never reach run folders, reports or the terminal."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from charpin_coordinator.redact import MIN_SECRET_CHARS, Redactor

from tests.conftest import make_repo

ROOT = Path(__file__).resolve().parents[2]
CANARIES = {
    "GITHUB_TOKEN": "canary-gh-???>>>~~~-0001",
    "AWS_SECRET_ACCESS_KEY": "canary-aws-???>>>~~~-0002",
    "MY_SERVICE_TOKEN": "canary-svc-???>>>~~~-0003",
}


def _forms(value: str) -> dict[str, bytes]:
    raw = value.encode()
    return {
        "plain": raw,
        "hex": raw.hex().encode(),
        "HEX": raw.hex().upper().encode(),
        "base64": base64.b64encode(raw).rstrip(b"="),
        "urlsafe-base64": base64.urlsafe_b64encode(raw).rstrip(b"="),
    }


def test_canaries_differ_between_base64_alphabets() -> None:
    # Otherwise the urlsafe check below would prove nothing the base64 check does not.
    for value in CANARIES.values():
        forms = _forms(value)
        assert forms["base64"] != forms["urlsafe-base64"]


def test_redactor_masks_every_form_of_a_secret_name_only() -> None:
    redactor = Redactor.from_env({**CANARIES, "HOME": "/home/someone-long", "SHORT_TOKEN": "abc"})
    assert redactor.names == sorted(CANARIES)
    for name, value in CANARIES.items():
        for form in _forms(value).values():
            masked = redactor.data(b"before " + form + b"=after")
            assert form not in masked
            assert f"[redacted:{name}]".encode() in masked
    assert redactor.text("HOME=/home/someone-long") == "HOME=/home/someone-long"
    assert redactor.text("abc") == "abc"  # shorter than MIN_SECRET_CHARS: left alone
    assert len("abc") < MIN_SECRET_CHARS


def test_redactor_masks_the_longer_of_two_overlapping_secrets_whole() -> None:
    redactor = Redactor({"A_TOKEN": "secret-value-1", "B_TOKEN": "secret-value-1-and-more"})
    assert redactor.text("x secret-value-1-and-more y") == "x [redacted:B_TOKEN] y"


def test_empty_redactor_changes_nothing() -> None:
    assert Redactor({}).data(b"anything at all") == b"anything at all"


LEAKY_TEST = """\
import base64, os

def test_dumps_the_environment():
    for name in {names!r}:
        raw = os.environ[name].encode()
        print(name, raw.hex(), raw.hex().upper(), base64.b64encode(raw).decode(),
              base64.urlsafe_b64encode(raw).decode())
    print(dict(os.environ))
    assert False, dict(os.environ)
"""


@pytest.mark.slow
def test_run_keeps_no_secret_anywhere(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {"tests/test_leak.py": LEAKY_TEST.format(names=sorted(CANARIES))},
    )
    out = tmp_path / "runs"
    env = dict(os.environ, **CANARIES)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "runner"), str(ROOT / "coordinator")])
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    argv = [
        sys.executable,
        "-m",
        "charpin_coordinator",
        "run",
        "--repo",
        str(repo),
        "--hosts",
        "local,clean",
        "--out",
        str(out),
        "--run-id",
        "r1",
        "--timeout",
        "120",
        "--junit",
        str(tmp_path / "drift.xml"),
        "--markdown",
        str(tmp_path / "drift.md"),
    ]
    done = subprocess.run(argv, env=env, capture_output=True, timeout=300, check=False)
    assert done.returncode & 1, done.stderr.decode()  # the leaky test failed, as planted
    local_log = (out / "r1" / "local" / "stdout.log").read_bytes()
    assert b"[redacted:GITHUB_TOKEN]" in local_log  # the test did print it; it was masked
    files = [p for p in (out / "r1").rglob("*") if p.is_file()]
    assert len(files) >= 9
    files += [tmp_path / "drift.xml", tmp_path / "drift.md"]
    blobs = {str(p): p.read_bytes() for p in files}
    blobs["stdout"], blobs["stderr"] = done.stdout, done.stderr
    leaks = [
        f"{name} ({kind}) in {where}"
        for name, value in CANARIES.items()
        for kind, form in _forms(value).items()
        for where, blob in blobs.items()
        if form in blob
    ]
    assert leaks == []

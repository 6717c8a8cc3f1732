"""The receipt seal: only the holder of the run's key can make one, for exactly these bytes."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from charpin_coordinator.redact import Redactor
from charpin_coordinator.remote.boxrun import accept_receipt
from charpin_coordinator.remote.errors import BoxError
from charpin_runner import seal
from charpin_runner.errors import IntegrityError
from charpin_runner.receipt import dumps

from tests.receipt_factory import make_receipt

RUN = "20261130T000000Z-a"


def _sealed(exit_code: int = 0, **parts: object) -> tuple[str, bytes, bytes]:
    key = seal.new_key()
    raw = dumps(make_receipt("a", **parts))
    return key, raw, seal.make(key, RUN, raw, exit_code)


def test_a_seal_checks_for_its_key_run_and_bytes() -> None:
    key, raw, sealed = _sealed()
    assert seal.check(key, RUN, raw, sealed, "box") == 0
    with pytest.raises(IntegrityError, match="does not check"):
        seal.check(seal.new_key(), RUN, raw, sealed, "box")
    with pytest.raises(IntegrityError, match="does not check"):
        seal.check(key, "another-run", raw, sealed, "box")
    with pytest.raises(IntegrityError, match="changed after"):
        seal.check(key, RUN, raw.replace(b'"passed"', b'"failed"', 1), sealed, "box")
    with pytest.raises(IntegrityError, match="unreadable"):
        seal.check(key, RUN, raw, b"not json", "box")


def test_a_seal_cannot_be_moved_to_another_status() -> None:
    key, raw, sealed = _sealed()
    doc = json.loads(sealed)
    doc["exit"] = 1
    with pytest.raises(IntegrityError, match="does not check"):
        seal.check(key, RUN, raw, json.dumps(doc).encode(), "box")


def decode_sealed(
    raw: bytes, sealed: bytes, *, exit_code: int | None = None, stopped: bool = False, **kw: str
) -> Any:
    """The coordinator's acceptance of a box receipt, with nothing to mask. Unless stopped, the
    runner ended by itself with the status it sealed (or exit_code)."""
    if exit_code is None and not stopped and sealed:
        exit_code = json.loads(sealed)["exit"]
    return accept_receipt(raw, sealed, exit_code=exit_code, redactor=Redactor({}), **kw)[1]


def test_the_sealed_status_must_be_what_the_receipt_means() -> None:
    receipt = make_receipt("a")
    failed = dataclasses.replace(receipt.exit, interpretation="failed", status=1)
    key, raw, sealed = _sealed(0, exit=failed)
    with pytest.raises(BoxError, match="means 1") as caught:
        decode_sealed(raw, sealed, key=key, run_id=RUN, label="box")
    assert caught.value.kind == "receipt-refused"
    key, raw, sealed = _sealed(1, exit=failed)
    assert decode_sealed(raw, sealed, key=key, run_id=RUN, label="box").exit.status == 1


def test_a_process_status_other_than_the_sealed_one_is_refused() -> None:
    key, raw, sealed = _sealed()
    with pytest.raises(BoxError, match="exited 3 but sealed 0"):
        decode_sealed(raw, sealed, key=key, run_id=RUN, label="box", exit_code=3)
    with pytest.raises(BoxError, match="no seal"):
        decode_sealed(raw, b"", key=key, run_id=RUN, label="box")


def test_a_runner_the_agent_had_to_stop_cannot_have_passed() -> None:
    """The agent stopped the runner (deadline): its own receipt reads interrupted or timed
    out. A sealed `ok` then was made by whoever held the key, not by the runner's end (an
    audit read the key from the agent's memory and stopped the runner with SIGSTOP)."""
    key, raw, sealed = _sealed()
    with pytest.raises(BoxError, match="the runner was stopped, yet its receipt reads ok") as got:
        decode_sealed(raw, sealed, key=key, run_id=RUN, label="box", stopped=True)
    assert got.value.kind == "receipt-refused"
    receipt = make_receipt("a")
    timed_out = dataclasses.replace(receipt.exit, interpretation="timed-out", status=-15)
    status = seal.runner_status(make_receipt("a", exit=timed_out), interrupted=False)
    key, raw, sealed = _sealed(status, exit=timed_out)
    got_receipt = decode_sealed(raw, sealed, key=key, run_id=RUN, label="box", stopped=True)
    assert got_receipt.exit.interpretation == "timed-out"

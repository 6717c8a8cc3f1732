"""`charpin-remote ledger suggest|review`: flake evidence from a real history database, filled by
the history's own recorder from run folders the coordinator's writers made (history_factory),
and real ledger files read by charpin's ledger loader."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.history import flaky
from charpin_coordinator.history import record as history_record
from charpin_runner.errors import ConfigError
from charpin_runner.ledger import load_ledger, parse_ledger

from tests.history_factory import box, days_ago, run_folder
from tests.receipt_factory import HEAD, IDS

FLAKY = IDS[0]  # fails in one run of three
STABLE = IDS[1]  # fails every time: broken, not flaky
RECOVERED = "tests/test_c.py::test_recovered"  # frozen, passes whenever it runs
GONE = "tests/test_gone.py::test_renamed"  # in the ledger, never in a run
TODAY = datetime.date(2026, 6, 1)
NOW = datetime.datetime(2026, 6, 1, 12, tzinfo=datetime.UTC)


def _expires(days: int) -> str:
    return (TODAY + datetime.timedelta(days=days)).isoformat()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Nine runs of one commit on box a (FLAKY fails in r3, r6, r9; STABLE in all), one on b."""
    out = tmp_path / "runs"
    for n in range(1, 10):
        run_id = f"r{n}"
        failing = [STABLE, FLAKY] if n % 3 == 0 else [STABLE]
        receipt = box("a", run_id, days_ago(20 - n, NOW), failing=failing, extra=[RECOVERED])
        run_folder(out, run_id, [receipt])
    run_folder(out, "r10", [box("b", "r10", days_ago(1, NOW), extra=[RECOVERED])])
    path = tmp_path / "history.sqlite"
    for folder in sorted(out.iterdir()):
        history_record.record(path, [folder])
    return path


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    entries = [
        {"id": RECOVERED, "reason": "was flaky", "owner": "ops", "expires": _expires(100)},
        {"id": STABLE, "reason": "broken", "owner": "dev", "expires": _expires(-3)},
        {"id": IDS[2], "reason": "slow", "owner": "qa", "expires": _expires(5)},
        {"id": GONE, "reason": "renamed since", "owner": "dev", "expires": _expires(200)},
    ]
    path = tmp_path / "flake-ledger.json"
    path.write_text(json.dumps({"version": 1, "entries": entries}))
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return code, out


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    return json.loads(cli(capsys, *argv, "--json")[1])


def test_planted_flaky_test_is_suggested_with_its_evidence(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    found = cli_json(capsys, "ledger", "suggest", "--history", str(db))
    assert [c["nodeid"] for c in found["candidates"]] == [FLAKY]
    (candidate,) = found["candidates"]
    (group,) = candidate["groups"]  # box b ran it once: no evidence there
    assert (group["box"], group["commit"], group["patch_sha256"]) == ("a", HEAD, None)
    assert group["failed"] == ["r3", "r6", "r9"]
    assert group["passed"] == ["r1", "r2", "r4", "r5", "r7", "r8"]
    assert (group["rate"]["failures"], group["rate"]["runs"]) == (3, 9)
    assert group["rate"]["upper_bound"] == pytest.approx(flaky.binomial_upper(3, 9))
    proposed = candidate["proposed"]
    assert proposed["id"] == FLAKY and "3 failures in 9 runs" in proposed["reason"]
    _, text = cli(capsys, "ledger", "suggest", "--history", str(db))
    assert "failed: r3, r6, r9" in text and "3 failures in 9 runs (observed 33.3 %" in text
    assert '"owner": ""' in text and '"expires": "YYYY-MM-DD"' in text


def test_stable_failure_and_stable_pass_are_not_flaky(db: Path) -> None:
    nodeids = [c.nodeid for c in flaky.suggest(db).candidates]
    assert STABLE not in nodeids and RECOVERED not in nodeids and IDS[2] not in nodeids


def test_proposed_entry_is_refused_until_a_person_fills_it_in(db: Path) -> None:
    (candidate,) = flaky.suggest(db).candidates
    entry = {
        "id": candidate.proposed.id,
        "reason": candidate.proposed.reason,
        "owner": candidate.proposed.owner,
        "expires": candidate.proposed.expires,
    }
    with pytest.raises(ConfigError, match="owner"):
        parse_ledger(json.dumps({"version": 1, "entries": [entry]}).encode(), "pasted")
    entry["owner"] = "ops@example.com"
    with pytest.raises(ConfigError, match="Invalid date 'YYYY-MM-DD'"):
        parse_ledger(json.dumps({"version": 1, "entries": [entry]}).encode(), "pasted")
    entry["expires"] = "2026-12-31"
    filled = parse_ledger(json.dumps({"version": 1, "entries": [entry]}).encode(), "pasted")
    assert [e.id for e in filled.entries] == [FLAKY]


def test_review_lists_expired_near_never_seen_and_unfreeze(
    db: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["ledger", "review", "--history", str(db), "--ledger", str(ledger)]
    found = cli_json(capsys, *argv, "--today", TODAY.isoformat())
    assert found["entries"] == 4
    assert [(n["id"], n["days_left"]) for n in found["expired"]] == [(STABLE, -3)]
    assert [(n["id"], n["days_left"]) for n in found["near_expiry"]] == [(IDS[2], 5)]
    assert [n["id"] for n in found["never_seen"]] == [GONE]
    # IDS[2] passes in every run too: near expiry and a candidate to unfreeze.
    assert [n["id"] for n in found["unfreeze"]] == [RECOVERED, IDS[2]]
    unfreeze = found["unfreeze"][0]
    streak = unfreeze["rate"]
    assert (streak["failures"], streak["runs"]) == (0, 10)
    # Exact: 1 - 0.05 ** (1 / 10) = 25.9 %, a little under the rule of three's 30 %.
    assert streak["upper_bound"] == pytest.approx(1 - 0.05 ** (1 / 10))
    _, text = cli(capsys, *argv, "--today", TODAY.isoformat())
    assert "0 failures in 10 runs: failure rate < 25.9 % at 95 % (exact binomial" in text
    assert "expired 2026-05-29 (3 day(s) ago), owner dev" in text
    # The stable failure is expired but no unfreeze candidate: one clean run (box b) after nine
    # failures on box a.
    review = flaky.review(db, load_ledger(ledger), TODAY)
    (expired,) = review.expired
    assert expired.rate is not None and expired.overall is not None
    assert (expired.rate.failures, expired.rate.runs) == (0, 1)
    assert (expired.overall.failures, expired.overall.runs) == (9, 10)


def test_review_clean_runs_threshold_and_near_days(db: Path, ledger: Path) -> None:
    loaded = load_ledger(ledger)
    strict = flaky.review(db, loaded, TODAY, near_days=4, clean_runs=11)
    assert strict.unfreeze == [] and strict.near_expiry == []


def test_binomial_upper_bound_is_exact() -> None:
    # 0 failures: closed form; the rule of three (3/n) is the looser approximation.
    assert flaky.binomial_upper(0, 40) == pytest.approx(1 - 0.05 ** (1 / 40))
    assert flaky.binomial_upper(0, 40) < 3 / 40
    for k, n in ((2, 9), (3, 9), (1, 40)):
        p = flaky.binomial_upper(k, n)
        cdf = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
        assert cdf == pytest.approx(0.05, abs=1e-9)
    assert flaky.binomial_upper(9, 9) == 1.0
    two_in_nine = flaky.describe(flaky.rate(2, 9))
    assert two_in_nine.startswith("2 failures in 9 runs: failure rate < 55.0 % at 95 %")

"""The flake ledger: validation, exact-id resolution, and how the probe applies it to a run."""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from charpin_runner.errors import ConfigError
from charpin_runner.ledger import Ledger, LedgerEntry, family_of, load_ledger, resolve
from charpin_runner.probe import ProbeData, read_probe
from charpin_runner.receipt import Deselected, Widening

PLUGIN = ("-p", "charpin_runner.plugin", "-p", "no:cacheprovider")
TODAY = datetime.date(2026, 6, 1)


def entry(nodeid: str, expires: object = "2026-12-31", **extra: Any) -> dict[str, Any]:
    return {"id": nodeid, "reason": "flaky on CI", "owner": "billing", "expires": expires, **extra}


def write_ledger(path: Path, *entries: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"version": 1, "entries": list(entries)}, indent=1))
    return path


def ledger_of(*ids: str, expires: str = "2026-12-31") -> Ledger:
    return Ledger("flake-ledger.json", "0" * 64, [LedgerEntry(i, "r", "o", expires) for i in ids])


def run_probe(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, ProbeData]:
    record = pytester.path / "probe.jsonl"
    result = pytester.runpytest(
        *PLUGIN, f"--charpin-receipt={record}", "--charpin-today=2026-06-01", *args
    )
    return result, read_probe(record)


# -- loading ----------------------------------------------------------------------------------


def test_load_ledger_keeps_entries_and_the_sha256_of_the_raw_bytes(tmp_path: Path) -> None:
    path = write_ledger(tmp_path / "flake-ledger.json", entry("tests/test_a.py::test_x"))
    ledger = load_ledger(path)
    assert ledger.entries == [
        LedgerEntry("tests/test_a.py::test_x", "flaky on CI", "billing", "2026-12-31")
    ]
    assert ledger.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert ledger.path == str(path)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([entry("a.py::t", expires=20261231)], "Expected `str`, got `int` - at `$.entries[0].expires`"),
        ([entry("a.py::t", expires="2026-13-01")], "Invalid date '2026-13-01', expected YYYY-MM-DD - at `$.entries[0].expires`"),
        ([entry("a.py::t", expires="20261231")], "Invalid date '20261231'"),
        ([entry("a.py::t"), entry("b.py::t"), entry("a.py::t")], "Duplicate id 'a.py::t' (first at `$.entries[0]`); keep one - at `$.entries[2].id`"),
        ([entry("a.py::t", reason=" ")], "Empty `reason`; say why the test is frozen - at `$.entries[0].reason`"),
        ([entry("a.py::t", owner="")], "Empty `owner`; name who will unfreeze it - at `$.entries[0].owner`"),
        ([entry("tests/a.py")], "Id 'tests/a.py' names no single test (needs '::')"),
        ([entry("a.py::t", ticket="X-1")], "Object contains unknown field `ticket` - at `$.entries[0]`"),
        ([{"id": "a.py::t", "reason": "r", "owner": "o"}], "Object missing required field `expires` - at `$.entries[0]`"),
    ],
)  # fmt: skip
def test_bad_entries_are_refused_with_one_line_naming_file_and_path(
    tmp_path: Path, entries: list[dict[str, Any]], message: str
) -> None:
    path = write_ledger(tmp_path / "flake-ledger.json", *entries)
    with pytest.raises(ConfigError) as info:
        load_ledger(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"flake ledger {path}: ")
    assert message in text
    assert text.endswith("see 'Flake ledger' in the README for the format")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"version": 2, "entries": []}', "Unsupported version 2, expected 1 - at `$.version`"),
        (b'{"version": true, "entries": []}', "Expected `int`, got `bool` - at `$.version`"),
        (b'{"version": 1, "entries": {}}', "Expected `array`, got `object` - at `$.entries`"),
        (b'{"version": 1, "entries": [}', "not valid JSON"),
        (b"\xff\xfe", "not UTF-8 text"),
        (b"[]", "Expected `object`, got `array` - at `$`"),
    ],
)
def test_bad_files_are_refused_with_one_line(tmp_path: Path, raw: bytes, message: str) -> None:
    path = tmp_path / "flake-ledger.json"
    path.write_bytes(raw)
    with pytest.raises(ConfigError, match=r"^flake ledger .*flake-ledger\.json: ") as info:
        load_ledger(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_ledger_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_ledger(tmp_path / "nope.json")
    assert "not found; create it" in str(info.value)
    assert '{"version": 1, "entries": []}' in str(info.value)


# -- resolution -------------------------------------------------------------------------------


def test_resolution_is_exact_not_a_prefix_match() -> None:
    collected = ["t.py::test_x", "t.py::test_x_other", "t.py::test_xy[1]"]
    res = resolve(ledger_of("t.py::test_x"), collected, TODAY)
    # pytest's --deselect would also take test_x_other (nodeid.startswith); the ledger must not.
    assert res.frozen == ["t.py::test_x"]
    assert res.deselected == [Deselected("t.py::test_x", "t.py::test_x")]
    assert (res.stale, res.widening, res.expired) == ([], [], [])


def test_entry_without_params_takes_its_parametrized_family_as_widening() -> None:
    collected = ["t.py::test_p[1]", "t.py::test_p[2]", "t.py::test_p2[1]", "t.py::TestK::test_p[1]"]
    res = resolve(ledger_of("t.py::test_p"), collected, TODAY)
    assert res.frozen == ["t.py::test_p[1]", "t.py::test_p[2]"]
    assert res.widening == [Widening("t.py::test_p", ["t.py::test_p[1]", "t.py::test_p[2]"])]


def test_entry_with_params_matches_only_that_case() -> None:
    collected = ["t.py::test_p[1]", "t.py::test_p[10]", "t.py::test_p[1][2]"]
    res = resolve(ledger_of("t.py::test_p[1]"), collected, TODAY)
    assert res.frozen == ["t.py::test_p[1]"]
    assert res.widening == []


def test_family_of_cuts_at_the_first_bracket_after_the_path() -> None:
    assert family_of("tests/[odd]/t.py::test_p[a::b[c]]") == "tests/[odd]/t.py::test_p"
    assert family_of("t.py::TestK::test_m") == "t.py::TestK::test_m"


def test_unmatched_entry_is_stale_and_expired_entry_is_not_applied() -> None:
    ledger = Ledger(
        "l.json",
        "0" * 64,
        [
            LedgerEntry("t.py::gone", "r", "o", "2026-12-31"),
            LedgerEntry("t.py::old", "r", "o", "2026-05-31"),
            LedgerEntry("t.py::today", "r", "o", "2026-06-01"),
        ],
    )
    res = resolve(ledger, ["t.py::old", "t.py::today"], TODAY)
    assert res.stale == ["t.py::gone"]
    assert res.expired == ["t.py::old"]
    # An entry is good through its expiry day.
    assert res.frozen == ["t.py::today"]


# -- applied by the probe ---------------------------------------------------------------------

TWINS = "def test_x(): pass\ndef test_x_other(): pass\n"


def test_probe_deselects_exactly_the_frozen_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=TWINS)
    ledger = write_ledger(pytester.path / "flake-ledger.json", entry("test_a.py::test_x"))
    result, probe = run_probe(pytester, f"--charpin-ledger={ledger}")
    result.assert_outcomes(passed=1, deselected=1)
    assert probe.collected == ["test_a.py::test_x", "test_a.py::test_x_other"]
    assert probe.selected == probe.executed == ["test_a.py::test_x_other"]
    assert probe.filtered == []
    assert probe.ledger.deselected == [Deselected("test_a.py::test_x", "test_a.py::test_x")]
    assert probe.ledger.frozen == ["test_a.py::test_x"]
    assert probe.ledger.entries == 1
    assert probe.ledger.path == "flake-ledger.json"
    assert probe.ledger.sha256 == hashlib.sha256(ledger.read_bytes()).hexdigest()
    assert probe.ledger.leaked == []


def test_parametrized_family_is_deselected_and_reported_as_widening(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_p="import pytest\n"
        "@pytest.mark.parametrize('n', [1, 2])\n"
        "def test_p(n): pass\n"
        "def test_q(): pass\n"
    )
    ledger = write_ledger(pytester.path / "flake-ledger.json", entry("test_p.py::test_p"))
    result, probe = run_probe(pytester, f"--charpin-ledger={ledger}")
    # Deselected, never skipped: nothing of the family shows up as run.
    result.assert_outcomes(passed=1, deselected=2)
    family = ["test_p.py::test_p[1]", "test_p.py::test_p[2]"]
    assert probe.ledger.widening == [Widening("test_p.py::test_p", family)]
    assert probe.ledger.deselected == [Deselected(i, "test_p.py::test_p") for i in family]
    assert probe.executed == ["test_p.py::test_q"]
    assert probe.outcomes == {"test_p.py::test_q": "passed"}


def test_stale_entry_is_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=TWINS)
    ledger = write_ledger(pytester.path / "flake-ledger.json", entry("test_a.py::test_renamed"))
    result, probe = run_probe(pytester, f"--charpin-ledger={ledger}")
    result.assert_outcomes(passed=2)
    assert probe.ledger.stale == ["test_a.py::test_renamed"]
    assert probe.ledger.deselected == []
    assert probe.executed == ["test_a.py::test_x", "test_a.py::test_x_other"]


def test_expired_entry_rejoins_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a="def test_x(): assert 0\ndef test_x_other(): pass\n")
    ledger = write_ledger(
        pytester.path / "flake-ledger.json", entry("test_a.py::test_x", expires="2026-05-31")
    )
    result, probe = run_probe(pytester, f"--charpin-ledger={ledger}")
    result.assert_outcomes(passed=1, failed=1)
    assert probe.ledger.expired == ["test_a.py::test_x"]
    assert probe.ledger.frozen == []
    assert probe.ledger.deselected == []
    assert probe.outcomes == {"test_a.py::test_x": "failed", "test_a.py::test_x_other": "passed"}
    assert probe.ledger.leaked == []


def test_frozen_test_readded_by_a_conftest_is_recorded_as_leaked(
    pytester: pytest.Pytester,
) -> None:
    # Grab the item inside collection, before the ledger applies; put it back at the end.
    pytester.makeconftest(
        "grabbed = []\n"
        "def pytest_collection_modifyitems(items):\n"
        "    grabbed.extend(i for i in items if i.name == 'test_x')\n"
        "def pytest_collection_finish(session):\n"
        "    session.items.extend(grabbed)\n"
    )
    pytester.makepyfile(test_a=TWINS)
    ledger = write_ledger(pytester.path / "flake-ledger.json", entry("test_a.py::test_x"))
    result, probe = run_probe(pytester, f"--charpin-ledger={ledger}")
    result.assert_outcomes(passed=2, deselected=1)
    assert probe.ledger.deselected == [Deselected("test_a.py::test_x", "test_a.py::test_x")]
    assert probe.ledger.leaked == ["test_a.py::test_x"]
    assert probe.executed == ["test_a.py::test_x", "test_a.py::test_x_other"]
    assert "frozen ids executed anyway: test_a.py::test_x" in probe.notes
    assert "executed although not selected: test_a.py::test_x" in probe.notes


def test_malformed_ledger_stops_pytest_with_one_error_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=TWINS)
    ledger = write_ledger(
        pytester.path / "flake-ledger.json",
        entry("test_a.py::test_x"),
        entry("test_a.py::test_x_other", expires="31/12/2026"),
    )
    result, _probe = run_probe(pytester, f"--charpin-ledger={ledger}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert errors == [
        f"ERROR: flake ledger {ledger}: Invalid date '31/12/2026', expected YYYY-MM-DD"
        " - at `$.entries[1].expires`; see 'Flake ledger' in the README for the format"
    ]
    assert "Traceback" not in result.stdout.str()
    assert not (pytester.path / "probe.jsonl").exists()

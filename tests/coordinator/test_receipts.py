"""The negative corpus: receipts that compare must refuse, each with its one-line message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.drift import build_report
from charpin_coordinator.receipts import _find_duplicate_key, load_receipt, read_receipt_file
from charpin_runner.errors import IntegrityError
from charpin_runner.receipt import (
    Deselected,
    FileState,
    PinResult,
    Pins,
    Quarantine,
    Widening,
    dumps,
)

from tests.receipt_factory import IDS, make_receipt

DATA = Path(__file__).parents[1] / "data" / "receipts"
NEGATIVE = DATA / "negative"
EXPECTED: dict[str, str] = json.loads((NEGATIVE / "expected.json").read_text())


def test_the_corpus_is_big_enough():
    assert len(EXPECTED) >= 12
    assert sorted(p.stem for p in NEGATIVE.glob("*.json") if p.name != "expected.json") == sorted(
        EXPECTED
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_negative_receipt_is_refused_with_its_message(name):
    path = NEGATIVE / f"{name}.json"
    with pytest.raises(IntegrityError) as info:
        read_receipt_file(path)
    message = str(info.value)
    assert "\n" not in message
    assert EXPECTED[name] in message
    assert message.startswith(str(path))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_compare_refuses_with_one_line_and_exit_8(name, capsys):
    good = DATA / "v1-minimal.json"
    code = main(["compare", str(good), str(NEGATIVE / f"{name}.json")])
    out, err = capsys.readouterr()
    assert code == 8
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("charpin-remote: error: ")
    assert "Traceback" not in err


def test_oversized_receipt_is_refused_before_parsing():
    raw = dumps(make_receipt())
    with pytest.raises(IntegrityError, match="over the 100-byte receipt cap"):
        load_receipt(raw, source="big", max_bytes=100)


def test_a_special_file_is_refused(tmp_path):
    with pytest.raises(IntegrityError, match="not a regular file"):
        read_receipt_file(tmp_path)


def test_a_clean_receipt_with_many_ids_is_accepted():
    ids = [f"tests/test_{n}.py::test_{n}" for n in range(2000)]
    receipt = make_receipt(
        **{
            "collection.collected": ids,
            "collection.selected": ids,
            "collection.executed": ids,
            "collection.order": ids,
            "outcomes": dict.fromkeys(ids, "passed"),
        }
    )
    # The ids are in numeric, not code point, order: the decoder sorts every set.
    assert load_receipt(dumps(receipt), source="x").collection.collected == sorted(ids)


def test_legal_posix_names_are_accepted():
    """Backslashes, colons, quotes, $ and ; are legal in POSIX names; only escapes are refused."""
    names = ["back\\slash.txt", "C:notes.txt", "it's $HOME; rm -rf", "bad\\xff", "tests/a b.py"]
    receipt = make_receipt(**{"tree.dirty_before": names, "tree.dirty_after": names})
    assert load_receipt(dumps(receipt), source="x").tree.dirty_after == sorted(names)


def _unsorted_twin() -> tuple[bytes, bytes]:
    """The same receipt twice: every set sorted, then every set in reverse order."""
    paths = ["tests/fixtures/a.json", "tests/fixtures/b.json"]
    states = [FileState(p, "file", 0o644, "a" * 64, None) for p in paths]
    pins = [PinResult(i, "passed", 0, "1" * 64, "2" * 64, {}, None) for i in ("p1", "p2")]
    sets = {
        "collection.collected": IDS,
        "collection.selected": IDS,
        "collection.executed": IDS,
        "collection.filtered": ["tests/test_c.py::f1", "tests/test_c.py::f2"],
        "collection.deselected": [Deselected(IDS[0], "e1"), Deselected(IDS[1], "e2")],
        "tree.dirty_before": paths,
        "tree.dirty_after": paths,
        "tree.outputs": ["build/", "dist/"],
        "fixtures.before": states,
        "fixtures.after": states,
        "fixtures.changed": paths,
        "quarantine": Quarantine(
            None,
            None,
            2,
            IDS[:2],
            ["s1", "s2"],
            [Widening("w1", IDS[:2]), Widening("w2", IDS[1:])],
            ["x1", "x2"],
            IDS[:2],
        ),
        "pins": Pins("pins.jsonl", True, pins),
        "environment.plugins": ["pytest-a-1", "pytest-b-2"],
    }
    flipped = {
        key: (
            Quarantine(
                value.ledger_path,
                value.ledger_sha256,
                value.entries,
                value.frozen[::-1],
                value.stale[::-1],
                [Widening(w.entry, w.matches[::-1]) for w in value.widening[::-1]],
                value.expired[::-1],
                value.leaked[::-1],
            )
            if isinstance(value, Quarantine)
            else Pins(value.source, value.replayed, value.results[::-1])
            if isinstance(value, Pins)
            else value[::-1]
        )
        for key, value in sets.items()
    }
    return dumps(make_receipt("a", **sets)), dumps(make_receipt("b", **flipped))


def test_sets_in_another_order_decode_to_the_same_canonical_receipt():
    """Set order is not evidence: reversed sets decode equal, so nothing drifts ("-0 +0")."""
    raw_sorted, raw_reversed = _unsorted_twin()
    assert raw_sorted.replace(b'"a"', b'"b"') != raw_reversed.replace(b'"a"', b'"b"')
    a = load_receipt(raw_sorted, source="a")
    b = load_receipt(raw_reversed, source="b")
    for field in ("tree", "collection", "fixtures", "quarantine", "pins"):
        assert getattr(a, field) == getattr(b, field), field
    assert a.environment.plugins == b.environment.plugins
    report = build_report([("a", a), ("b", b)])
    twin = build_report([("a", a), ("b", load_receipt(raw_sorted, source="a"))])
    assert "collection" not in {d.name for d in report.dimensions}
    assert (report.dimensions, report.gates, report.exit_code) == (
        twin.dimensions,
        twin.gates,
        twin.exit_code,
    )
    assert report.groups == [["a", "b"]]


@pytest.mark.parametrize(
    ("where", "parts"),
    [
        ("$.collection.filtered[1]", {"collection.filtered": [IDS[0], IDS[0]]}),
        ("$.tree.flagged_after[1]", {"tree.flagged_after": ["a", "a"]}),
        ("$.tree.outputs[1]", {"tree.outputs": ["build/", "build/"]}),
        ("$.quarantine.stale[1]", {"quarantine.stale": ["s", "s"]}),
        ("$.quarantine.widening[1].entry", {"quarantine.widening": [Widening("w", IDS)] * 2}),
        (
            "$.quarantine.widening[0].matches[1]",
            {"quarantine.widening": [Widening("w", IDS[:1] * 2)]},
        ),
        ("$.environment.plugins[1]", {"environment.plugins": ["p-1", "p-1"]}),
        ("$.fixtures.missing_roots[1]", {"fixtures.missing_roots": ["r", "r"]}),
    ],
)
def test_a_repeated_item_in_any_set_is_refused_at_its_path(where, parts):
    with pytest.raises(IntegrityError) as info:
        load_receipt(dumps(make_receipt(**parts)), source="x")
    assert f"- at `{where}`" in str(info.value)
    assert "duplicate" in str(info.value)


def _reordered(raw: bytes) -> bytes:
    """The same JSON with every object's keys reversed: valid, but not the runner's layout."""
    return json.dumps(json.loads(raw, object_pairs_hook=lambda pairs: dict(pairs[::-1]))).encode()


def test_a_receipt_in_another_layout_is_checked_key_by_key():
    raw = dumps(make_receipt(**{"environment.variables": {"LANG": "C", "TZ": "UTC"}}))
    assert load_receipt(_reordered(raw), source="x") == load_receipt(raw, source="x")
    repeated = _reordered(raw).replace(b'"TZ": "UTC"', b'"TZ": "UTC", "TZ": "Asia/Tokyo"')
    with pytest.raises(IntegrityError, match=r"repeated key 'TZ' - at `\$.environment.variables`"):
        load_receipt(repeated, source="x")


def test_a_repeated_node_id_key_names_the_outcomes_path_not_a_key_path():
    raw = dumps(make_receipt()).replace(
        b'"tests/test_b.py::test_three": "passed"',
        b'"tests/test_b.py::test_three": "failed", "tests/test_b.py::test_three": "passed"',
    )
    with pytest.raises(IntegrityError) as info:
        load_receipt(raw, source="x")
    assert str(info.value) == (
        "x: receipt refused: repeated key 'tests/test_b.py::test_three' - at `$.outcomes`; "
        "each key may appear once per object"
    )


def test_json_that_only_one_reader_accepts_is_refused_not_guessed():
    assert "does not parse the same way" in (_find_duplicate_key(b'{"a": 1,}') or "")
    assert _find_duplicate_key(b'{"a": [{"b": 1}, {"c": {"d": 1, "d": 2}}]}') == (
        "repeated key 'd' - at `$.a[1].c`; each key may appear once per object"
    )

"""The negative corpus: receipts that compare must refuse, each with its one-line message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.receipts import load_receipt, read_receipt_file
from charpin_runner.errors import IntegrityError
from charpin_runner.receipt import dumps

from tests.receipt_factory import make_receipt

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
    assert load_receipt(dumps(receipt), source="x").collection.collected == ids


def test_legal_posix_names_are_accepted():
    """Backslashes, colons, quotes, $ and ; are legal in POSIX names; only escapes are refused."""
    names = ["back\\slash.txt", "C:notes.txt", "it's $HOME; rm -rf", "bad\\xff", "tests/a b.py"]
    receipt = make_receipt(**{"tree.dirty_before": names, "tree.dirty_after": names})
    assert load_receipt(dumps(receipt), source="x").tree.dirty_after == names

"""The receipt schema is a contract: a snapshot, golden receipts, and both sides agreeing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest
from charpin_coordinator.config import decode_table
from charpin_coordinator.receipts import read_receipt_file
from charpin_runner import config as runner_config
from charpin_runner.errors import ConfigError
from charpin_runner.receipt import SCHEMA_VERSION, Receipt

DATA = Path(__file__).parents[1] / "data"
SNAPSHOT = DATA / "receipt.schema.json"


def current_schema() -> str:
    schema = msgspec.json.schema(Receipt)
    return json.dumps(schema, indent=1, sort_keys=True) + "\n"


def test_schema_matches_the_snapshot():
    """A receipt change must update tests/data/receipt.schema.json and the CHANGELOG together.

    Regenerate with CHARPIN_UPDATE_SCHEMA=1 (then add a "Receipt schema" CHANGELOG entry).
    """
    if os.environ.get("CHARPIN_UPDATE_SCHEMA") == "1":
        SNAPSHOT.write_text(current_schema())
    assert SNAPSHOT.read_text() == current_schema(), (
        "the receipt schema changed: rerun with CHARPIN_UPDATE_SCHEMA=1 and add a "
        "'Receipt schema' entry to CHANGELOG.md"
    )


def test_changelog_documents_the_schema_version():
    changelog = (Path(__file__).parents[2] / "CHANGELOG.md").read_text()
    assert "### Receipt schema" in changelog
    assert f"Schema v{SCHEMA_VERSION}" in changelog


@pytest.mark.parametrize(
    "golden", sorted((DATA / "receipts").glob("v*.json")), ids=lambda p: p.name
)
def test_golden_receipts_keep_decoding(golden):
    receipt = read_receipt_file(golden)
    assert receipt.schema_version == SCHEMA_VERSION


def test_there_is_at_least_one_golden_receipt():
    assert list((DATA / "receipts").glob("v1-*.json"))


BAD_TABLES = [
    ({"watch": "tests/fixtures"}, "Expected `array`, got `str` - at `$.tool.charpin.watch`"),
    ({"unknown_key": 1}, "unknown field `unknown_key` - at `$.tool.charpin`"),
    ({"timeout": "soon"}, "at `$.tool.charpin.timeout`"),
    ({"pins": {"no_such": True}}, "unknown field `no_such` - at `$.tool.charpin.pins`"),
    ({"ledger": 3}, "Expected `str`, got `int` - at `$.tool.charpin.ledger`"),
    (
        {"timeout": -5},
        "timeout must be a positive number of seconds, not -5.0 - at `$.tool.charpin`",
    ),
    (
        {"watch": ["../up"]},
        "watch root '../up' must be a relative path inside the repository - at `$.tool.charpin`",
    ),
    (
        {"test_command": []},
        "test_command must not be empty; leave it out for python -m pytest - at `$.tool.charpin`",
    ),
    (
        {"pins": {"pythonpath": ["src", "/opt/libs"]}},
        "pythonpath folder '/opt/libs' must be a relative path inside the repository"
        " - at `$.tool.charpin.pins`",
    ),
    ({"pins": {"pythonpath": "src"}}, "at `$.tool.charpin.pins.pythonpath`"),
]


@pytest.mark.parametrize("table, message", BAD_TABLES)
def test_runner_and_coordinator_refuse_the_same_config_with_the_same_path(table, message):
    with pytest.raises(ConfigError) as coordinator:
        decode_table(table)
    with pytest.raises(ConfigError) as runner:
        runner_config.from_table(table)
    assert message in str(coordinator.value)
    path = message.rsplit("at ", 1)[1]
    assert path in str(runner.value)


def test_a_good_table_decodes_identically_on_both_sides():
    table = {
        "watch": ["data"],
        "outputs": ["out/"],
        "timeout": 30,
        "env_allow": ["FOO"],
        "pins": {"pythonpath": [".", "src"]},
    }
    assert decode_table(table) == runner_config.from_table(table)


def test_the_fast_to_dict_is_exactly_dataclasses_asdict():
    import dataclasses

    from charpin_runner.receipt import PinResult, Pins, to_dict

    from tests.receipt_factory import change, stale_local

    pin = PinResult("p", "failed", 1, "a" * 64, "b" * 64, {"out/x": "c" * 64}, "stdout", ["-a"])
    for receipt in (stale_local(), change(stale_local(), pins=Pins("pins.jsonl", True, [pin]))):
        assert to_dict(receipt) == dataclasses.asdict(receipt)

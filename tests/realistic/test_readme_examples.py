"""The README's set-up and configuration examples are exercised exactly as printed (#10)."""

from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path

import pytest
from charpin_coordinator.config import decode_table
from charpin_runner import config as runner_config

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _toml_blocks() -> list[str]:
    blocks = re.findall(r"^( *)```toml\n(.*?)^\1```", README, flags=re.S | re.M)
    return [textwrap.dedent(body) for _, body in blocks]


@pytest.mark.parametrize("index", range(len(_toml_blocks())))
def test_every_toml_example_is_a_valid_configuration(index: int) -> None:
    table = tomllib.loads(_toml_blocks()[index])
    charpin = table.get("tool", {}).get("charpin")
    assert charpin is not None, "a README toml example without [tool.charpin]"
    # Both sides accept it: the coordinator (msgspec) and the box (stdlib twin).
    decode_table(charpin, source="README.md")
    runner_config.from_table(charpin)


def test_there_are_toml_examples_to_check() -> None:
    blocks = _toml_blocks()
    assert len(blocks) >= 5
    assert any("prepare = " in block for block in blocks)


def test_the_set_up_is_two_commands_and_ci_runs_the_same_test_command() -> None:
    setup = README.split("## Set-up: two commands from a fresh clone", 1)[1]
    block = re.search(r"```\n(.*?)```", setup, flags=re.S)
    assert block is not None
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2
    assert lines[0].endswith(".venv/bin/charpin-remote demo")
    test_command = lines[1].removeprefix(".venv/bin/")
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()

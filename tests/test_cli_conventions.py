"""Both commands behave like the tools people already use: every --help lists its exit codes,
every reporting command takes --color with NO_COLOR/FORCE_COLOR, the terminal's width is used,
results a user scripts come as --json, `--markdown -` prints Markdown, completion is a script."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from charpin_coordinator.cli import build_parser as remote_parser
from charpin_coordinator.cli import main as remote_main
from charpin_coordinator.remote.demo import build_demo_repo
from charpin_coordinator.remote.demo_cli import AGENT_PATCH_NEW, AGENT_PATCH_OLD
from charpin_runner import colors
from charpin_runner.cli import build_parser as runner_parser
from charpin_runner.cli import main as runner_main
from charpin_runner.receipt import dumps

from tests.conftest import git
from tests.receipt_factory import IDS, make_receipt

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The commands whose output is a verdict or a report someone reads on a terminal.
REPORTING = [
    ("charpin-remote", "run"),
    ("charpin-remote", "compare"),
    ("charpin-remote", "verify"),
    ("charpin-remote", "verify-bundle"),
    ("charpin-remote", "demo"),
    ("charpin-remote", "hosts check"),
    ("charpin", "pins check"),
    ("charpin", "guard"),
]
SCRIPTED = [
    ("charpin-remote", "run"),
    ("charpin-remote", "compare"),
    ("charpin-remote", "verify"),
    ("charpin-remote", "hosts check"),
    ("charpin", "pins check"),
    ("charpin", "guard"),
    ("charpin", "inventory"),
]


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...]
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, (*path, name))


def _parsers() -> dict[str, argparse.ArgumentParser]:
    found = dict(_walk(remote_parser(), ("charpin-remote",)))
    found.update(_walk(runner_parser(), ("charpin",)))
    return found


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: a for a in parser._actions for flag in a.option_strings}


def test_every_help_lists_its_exit_codes() -> None:
    parsers = _parsers()
    assert len(parsers) >= 40  # every command and subcommand of both programs
    missing = []
    for path, parser in parsers.items():
        text = " ".join(parser.format_help().split())
        said = re.search(r"Exit codes?: (.*)", text)
        if said is None or not re.search(r"\b0\b", said.group(1)) or "64" not in said.group(1):
            missing.append(path)
    assert missing == []


@pytest.mark.parametrize(("program", "command"), REPORTING)
def test_every_reporting_command_takes_color(program: str, command: str) -> None:
    action = _options(_parsers()[f"{program} {command}"])["--color"]
    assert action.choices == colors.CHOICES and action.default == "auto"


@pytest.mark.parametrize(("program", "command"), SCRIPTED)
def test_results_a_user_scripts_come_as_json(program: str, command: str) -> None:
    assert "--json" in _options(_parsers()[f"{program} {command}"])


@pytest.mark.parametrize(
    ("choice", "env", "tty", "expected"),
    [
        ("auto", {}, True, True),
        ("auto", {}, False, False),
        ("auto", {"TERM": "dumb"}, True, False),
        ("auto", {"NO_COLOR": "1"}, True, False),
        ("auto", {"NO_COLOR": ""}, True, True),  # set but empty: no-color.org says ignore it
        ("auto", {"FORCE_COLOR": "1"}, False, True),
        ("auto", {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, False),
        ("always", {"NO_COLOR": "1"}, False, True),
        ("never", {"FORCE_COLOR": "1"}, True, False),
    ],
)
def test_color_choice_and_environment(
    choice: str, env: dict[str, str], tty: bool, expected: bool
) -> None:
    class Stream:
        def isatty(self) -> bool:
            return tty

    assert colors.wanted(choice, Stream(), env) is expected  # type: ignore[arg-type]


def _compare(tmp_path: Path, *args: str, env: dict[str, str]) -> str:
    flipped = {**dict.fromkeys(IDS, "passed"), IDS[2]: "failed"}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(dumps(make_receipt("laptop")))
    b.write_bytes(
        dumps(make_receipt("ci", outcomes=flipped, **{"exit.status": 1,
                                                      "exit.interpretation": "failed"}))
    )  # fmt: skip
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    done = subprocess.run(
        [sys.executable, "-m", "charpin_coordinator", "compare", str(a), str(b), *args],
        capture_output=True,  # a pipe, never a terminal
        text=True,
        env={**clean, "PYTHONPATH": f"{ROOT / 'runner'}:{ROOT / 'coordinator'}", **env},
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    return done.stdout


def test_force_color_colours_a_pipe_and_no_color_or_never_wins(tmp_path: Path) -> None:
    assert not ANSI.search(_compare(tmp_path, env={}))
    assert ANSI.search(_compare(tmp_path, env={"FORCE_COLOR": "1"}))
    assert not ANSI.search(_compare(tmp_path, env={"FORCE_COLOR": "1", "NO_COLOR": "1"}))
    assert not ANSI.search(_compare(tmp_path, "--color", "never", env={"FORCE_COLOR": "1"}))
    assert ANSI.search(_compare(tmp_path, "--color", "always", env={"NO_COLOR": "1"}))


def test_the_report_fits_the_terminal_width(tmp_path: Path) -> None:
    def widest(columns: int) -> int:
        out = _compare(tmp_path, "--color", "always", env={"COLUMNS": str(columns)})
        return max(len(ANSI.sub("", line)) for line in out.splitlines())

    assert widest(72) <= 72
    assert widest(200) > 72  # the wide gate and outcome tables use the room they get


def test_import_help_names_the_formats_by_what_they_are() -> None:
    for path, parser in _parsers().items():
        if path.startswith("charpin import"):
            text = parser.format_help().lower()
            assert "seed" not in text, path
    listing = _parsers()["charpin import"].format_help()
    for words in ("pins.jsonl of recorded runs", "output-tree manifest", "command-matrix",
                  "cram or prysk", "flake ledger", "evidence manifests"):  # fmt: skip
        assert words in " ".join(listing.split()), words


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "runner"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    return build_demo_repo(tmp_path / "invoice-export", stale=False).path


def test_pins_check_json(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert runner_main(["pins", "check", "--repo", str(demo), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 0 and doc["drifted"] == 0 and doc["passed"] == len(doc["pins"])
    code = demo / "export_invoices.py"
    code.write_text(code.read_text().replace(AGENT_PATCH_OLD, AGENT_PATCH_NEW, 1))
    assert runner_main(["pins", "check", "--repo", str(demo), "--json"]) == 2
    out = capsys.readouterr()
    doc = json.loads(out.out)  # stdout is the JSON alone; the report went to stderr
    assert doc["exit_code"] == 2 and doc["drifted"] >= 1
    drifted = [p for p in doc["pins"] if p["status"] == "drifted"]
    assert drifted and all(p["classes"] for p in drifted)
    assert "DRIFT " in out.err


def test_hosts_check_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = remote_main(["hosts", "check", "--hosts", "clean", "--json", "--repo", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == code
    [host] = doc["hosts"]
    assert host["host"] == "clean" and host["ok"] is (code == 0)
    assert [c["name"] for c in host["checks"]][:2] == ["reach", "python"]


@pytest.mark.slow
def test_verify_markdown_dash_prints_markdown_and_writes_no_file(
    demo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code = demo / "export_invoices.py"
    code.write_text(code.read_text().replace(AGENT_PATCH_OLD, AGENT_PATCH_NEW, 1))
    git(demo, "add", "-A")
    patch = subprocess.run(
        ["git", "-C", str(demo), "diff", "--cached"], capture_output=True, check=True
    ).stdout
    git(demo, "reset", "-q", "--hard", "HEAD")
    (demo.parent / "agent.diff").write_bytes(patch)
    monkeypatch.chdir(demo.parent)
    argv = ["verify", "--repo", str(demo), "--patch", "agent.diff", "--out", "v", "--quiet"]
    status = remote_main([*argv, "--markdown", "-"])
    out = capsys.readouterr()
    assert status & 2  # REJECT: a cent moved
    assert out.out.lstrip().startswith("#") and "REJECT" in out.out
    assert "verify folder:" in out.err and "verify folder:" not in out.out
    assert not (demo.parent / "-").exists()
    assert remote_main([*argv, "--markdown", "-", "--json"]) == 64
    assert "--json and --markdown - would both print on stdout" in capsys.readouterr().err


def test_completion_scripts_come_from_the_real_parsers() -> None:
    pytest.importorskip("shtab")
    for program, words in (
        ("charpin-remote", ("verify-bundle", "--ssh-config")),
        ("charpin", ("inventory", "--pre-commit")),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "charpin_coordinator", "completion", "bash", "--program",
             program],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": f"{ROOT / 'runner'}:{ROOT / 'coordinator'}"},
            timeout=120,
            check=True,
        )  # fmt: skip
        assert all(word in done.stdout for word in words), program
    # zsh and tcsh too; an unknown shell is a usage error.
    assert remote_main(["completion", "fish"]) == 64


def test_completion_costs_nothing_at_start_up() -> None:
    # shtab is imported only by `completion`: neither command's start-up imports it.
    for program in ("charpin_coordinator", "charpin_runner"):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", program, "--version"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": f"{ROOT / 'runner'}:{ROOT / 'coordinator'}"},
            timeout=120,
            check=True,
        )
        imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()]
        assert not [name for name in imported if name.split(".")[0] == "shtab"]

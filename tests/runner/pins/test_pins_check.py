"""Record the messy programs, then prove behaviour changes are caught and refactors stay green."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from charpin_runner.cli import main
from pins_helpers import Runner, build_messy_repo, edit

# (program, old, new, expected primary failure class, a pin it must break)
BEHAVIOUR_CHANGES = [
    (
        "export_invoices.py",
        "rounding=ROUND_HALF_EVEN",
        'rounding="ROUND_HALF_UP"',
        "stdout",
        "inv-usd",
    ),
    (
        "export_invoices.py",
        'print("TOTAL %s" % money(total))',
        'sys.stdout.write("TOTAL %s" % money(total))',
        "whitespace",
        "inv-usd",
    ),
    (
        "export_invoices.py",
        '"processed %d customers"',
        '"processed %d customer(s)"',
        "stderr",
        "inv-usd",
    ),
    ("export_invoices.py", "return 3", "return 4", "exit-code", "inv-usd"),
    ("make_report.py", "indent=2", "indent=4", "file-content", "report"),
    (
        "make_report.py",
        "json.dump(summary, handle, indent=2, sort_keys=True)",
        'json.dump({"total": summary["total"], "regions": summary["regions"]}, handle, indent=2)',
        "file-content",
        "report",
    ),
    (
        "make_report.py",
        '    print("%d regions" % len(by_region))',
        '    print("%d regions" % len(by_region))\n'
        '    open(os.path.join(OUT, "README.txt"), "w").close()',
        "file-set",
        "report",
    ),
    (
        "make_report.py",
        '    print("%d regions" % len(by_region))',
        '    print("%d regions" % len(by_region))\n    open("report.cache", "w").write("x")',
        "write-outside-output",
        "report",
    ),
    (
        "make_report.py",
        '    print("%d regions" % len(by_region))',
        '    print("%d regions" % len(by_region))\n    open("../escaped.txt", "w").write("x")',
        "write-outside-output",
        "report",
    ),
    (
        "make_report.py",
        '    print("%d regions" % len(by_region))',
        '    print("%d regions" % len(by_region))\n'
        '    open(os.path.join(os.path.dirname(__file__), "cache.txt"), "w").write("x")',
        "write-outside-output",
        "report",
    ),
    (
        "legacy_sync.py",
        'COUNTER = {"items": 0}',
        'COUNTER = {"items": 0}\nopen(os.path.join(os.environ["TMPDIR"], "left"), "w").close()',
        "write-outside-output",
        "legacy",
    ),
    (
        "legacy_sync.py",
        'COUNTER = {"items": 0}',
        'COUNTER = {"items": 0}\nVERBOSE = os.environ.get("SYNC_VERBOSE")',
        "env-read",
        "legacy",
    ),
    (
        "legacy_sync.py",
        'os.makedirs("out", exist_ok=True)',
        'os.makedirs("out", exist_ok=True)\nos.chmod("out", 0o755)\n'
        'open(os.path.join("out", "sync.log"), "w").close()\n'
        'os.chmod(os.path.join("out", "sync.log"), 0o600)',
        "file-mode",
        "legacy",
    ),
]

REFACTORS = [
    ("export_invoices.py", 'return "$" + str(d)', 'return f"${d}"'),
    ("export_invoices.py", "SEEN = []", "SEEN: list = []  # customers seen so far"),
    ("make_report.py", "by_region = {}\n", "by_region: dict = {}\n"),
    ("make_report.py", "def load(path):", "def load(path, *, encoding=None):"),
    (
        "legacy_sync.py",
        '    for name in names:\n        COUNTER["items"] += 1\n',
        '    for name in list(names):\n        COUNTER["items"] = COUNTER["items"] + 1\n',
    ),
]


@pytest.fixture(scope="module")
def recorded_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Recording proves stability with several replays per pin, so do it once per module.
    repo = build_messy_repo(tmp_path_factory.mktemp("recorded"))
    code = main(["pins", "record", "--repo", str(repo)])
    assert code == 0
    return repo


@pytest.fixture
def recorded(recorded_once: Path, tmp_path: Path, charpin: Runner) -> Path:
    repo = tmp_path / "copy"
    shutil.copytree(recorded_once, repo)
    code, out, err = charpin("pins", "check", "--repo", str(repo))
    assert code == 0, out + err
    return repo


@pytest.mark.parametrize(
    ("program", "old", "new", "expected", "pin_id"),
    BEHAVIOUR_CHANGES,
    ids=[f"{c[4]}-{c[3]}-{i}" for i, c in enumerate(BEHAVIOUR_CHANGES)],
)
def test_behaviour_change_is_caught_with_its_class(
    recorded: Path, charpin: Runner, program: str, old: str, new: str, expected: str, pin_id: str
) -> None:
    edit(recorded / program, old, new)
    code, out, _err = charpin("pins", "check", "--repo", str(recorded), "--jobs", "2")
    assert code == 2, out
    assert f"DRIFT {pin_id} [{expected}]" in out
    result = json.loads((recorded / ".charpin/pins-actual" / pin_id / "result.json").read_text())
    assert result["failure_class"] == expected


@pytest.mark.parametrize(("program", "old", "new"), REFACTORS)
def test_behaviour_preserving_refactor_stays_green(
    recorded: Path, charpin: Runner, program: str, old: str, new: str
) -> None:
    edit(recorded / program, old, new)
    code, out, err = charpin("pins", "check", "--repo", str(recorded))
    assert code == 0, out + err
    assert "5 passed, 0 drifted" in out


def test_failure_output_is_actionable(recorded: Path, charpin: Runner) -> None:
    edit(recorded / "export_invoices.py", "rounding=ROUND_HALF_EVEN", 'rounding="ROUND_HALF_UP"')
    code, out, _err = charpin("pins", "check", "--repo", str(recorded))
    assert code == 2
    assert "argv: ['export_invoices.py']" in out
    assert "--- golden/stdout" in out and "+++ actual/stdout" in out
    assert "-cheap      net=$0.12" in out and "+cheap      net=$0.13" in out
    actual = recorded / ".charpin" / "pins-actual" / "inv-usd"
    assert b"$0.13" in (actual / "stdout").read_bytes()
    assert (actual / "exit_code").read_text() == "3\n"
    assert not (recorded / ".charpin" / "pins-actual" / "report").exists()


def test_report_outputs_kept_and_diffed(recorded: Path, charpin: Runner) -> None:
    edit(recorded / "make_report.py", "indent=2", "indent=4")
    code, out, _err = charpin("pins", "check", "--repo", str(recorded))
    assert code == 2
    assert "changed file: summary.json" in out
    assert "+++ actual/out/summary.json" in out
    kept = recorded / ".charpin" / "pins-actual" / "report" / "files" / "summary.json"
    assert kept.read_text().startswith('{\n    "regions"')


def test_missing_final_newline_is_a_difference(recorded: Path, charpin: Runner) -> None:
    edit(
        recorded / "legacy_sync.py", 'print("sync %s" % name)', 'sys.stdout.write("sync %s" % name)'
    )
    code, out, _err = charpin("pins", "check", "--repo", str(recorded))
    assert code == 2
    assert "DRIFT legacy [whitespace]" in out
    assert "No newline at end of file" in out


def test_a_trailing_space_is_shown_in_the_diff(recorded: Path, charpin: Runner) -> None:
    # Only whitespace moved: the diff must still show where (#10 item 13).
    edit(recorded / "legacy_sync.py", 'print("sync %s" % name)', 'print("sync %s " % name)')
    code, out, _err = charpin("pins", "check", "--repo", str(recorded), "--id", "legacy")
    assert code == 2
    assert "DRIFT legacy [whitespace]" in out
    assert "  -sync alpha\n" in out and "  +sync alpha\u2420\n" in out
    assert "  (trailing whitespace shown as \u2420 space" in out


def test_no_pins_says_how_to_record_the_first(tmp_path: Path, charpin: Runner) -> None:
    # Not "record some with `charpin pins record`", which has nothing to record either.
    first = "record the first with `charpin pins record --id NAME -- PROGRAM ARGS`"
    for command in ("check", "record"):
        code, out, err = charpin("pins", command, "--repo", str(tmp_path))
        assert code == 64, out
        assert "no pins yet: neither pins.jsonl nor cases/ exists" in err and first in err
    (tmp_path / "pins.jsonl").write_text("")
    for command in ("check", "record"):
        code, out, err = charpin("pins", command, "--repo", str(tmp_path))
        assert code == 64, out
        assert f"no pins yet: pins.jsonl holds none; {first}" in err
        assert "every pin has a golden" not in out


def test_timeout_is_a_failure_class(recorded: Path, charpin: Runner) -> None:
    # Long enough for the sandbox and the interpreter to start on a loaded machine.
    (recorded / "pyproject.toml").write_text("[tool.charpin.pins]\ntimeout = 5.0\n")
    edit(
        recorded / "legacy_sync.py",
        "def sync(names):",
        "import time\ntime.sleep(30)\n\n\ndef sync(names):",
    )
    code, out, _err = charpin("pins", "check", "--repo", str(recorded), "--id", "legacy")
    assert code == 2
    # A killed run's partial env reads and outputs are not compared: timeout is the only class.
    assert "DRIFT legacy [timeout]  classes: timeout\n" in out
    assert "env keys read" not in out
    result = json.loads((recorded / ".charpin/pins-actual/legacy/result.json").read_text())
    assert result["classes"] == ["timeout"]


def test_new_env_key_is_drift_even_while_unset(recorded: Path, charpin: Runner) -> None:
    edit(
        recorded / "export_invoices.py",
        "TAX = Decimal(",
        'os.getenv("INVOICE_DEBUG")\nTAX = Decimal(',
    )
    code, out, _err = charpin("pins", "check", "--repo", str(recorded))
    assert code == 2
    assert "DRIFT inv-usd [env-read]" in out
    assert "new ['INVOICE_DEBUG']" in out


def test_pin_runs_with_only_declared_env(
    recorded: Path, charpin: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Values in the caller's environment must not reach pins that do not declare them:
    # inv-exempt would print "$" amounts and legacy-empty would log mode=live.
    monkeypatch.setenv("CURRENCY", "USD")
    monkeypatch.setenv("SYNC_MODE", "live")
    code, out, err = charpin("pins", "check", "--repo", str(recorded))
    assert code == 0, out + err


def test_write_next_to_file_names_the_repo_path(recorded: Path, charpin: Runner) -> None:
    edit(
        recorded / "make_report.py",
        '    print("%d regions" % len(by_region))',
        '    print("%d regions" % len(by_region))\n'
        '    open(os.path.join(os.path.dirname(__file__), "cache.txt"), "w").write("x")',
    )
    code, out, _err = charpin("pins", "check", "--repo", str(recorded), "--jobs", "2")
    assert code == 2, out
    assert "DRIFT report [write-outside-output]" in out
    assert "wrote into the repository: cache.txt" in out
    # Only the pin that wrote is blamed; the other pins of the parallel batch stay green.
    assert "4 passed, 1 drifted" in out
    # Nothing is cleaned up behind the user's back: the file is reported and left in place.
    assert (recorded / "cache.txt").read_text() == "x"
    result = json.loads((recorded / ".charpin/pins-actual/report/result.json").read_text())
    assert result["outside_writes"] == ["$REPO/cache.txt"]


def test_write_once_cache_in_the_repo_is_still_attributed(recorded: Path, charpin: Runner) -> None:
    # The pin writes the cache only when it is missing, so a plain rerun would not repeat it.
    edit(
        recorded / "legacy_sync.py",
        'COUNTER = {"items": 0}',
        'COUNTER = {"items": 0}\n'
        'CACHE = os.path.join(os.path.dirname(__file__), "data", "sync.cache")\n'
        "if not os.path.exists(CACHE):\n"
        "    os.makedirs(os.path.dirname(CACHE), exist_ok=True)\n"
        '    open(CACHE, "w").write("warm")',
    )
    code, out, _err = charpin("pins", "check", "--repo", str(recorded))
    assert code == 2, out
    assert "wrote into the repository: data/sync.cache" in out
    drifted = sorted(line.split()[1] for line in out.splitlines() if line.startswith("DRIFT"))
    # Both legacy pins run the script; which one wrote first does not matter, each one would.
    assert drifted == ["legacy", "legacy-empty"]


def test_scratch_files_in_tmpdir_and_cwd_that_are_removed_stay_green(
    tmp_path: Path, charpin: Runner
) -> None:
    # Watching the whole sandbox must not blame a program for scratch files it cleans up.
    repo = build_messy_repo(tmp_path)
    (repo / "scratch.py").write_text(
        "import os, tempfile\n"
        "with tempfile.NamedTemporaryFile() as handle:\n"
        "    handle.write(b'x')\n"
        "open('scratch.tmp', 'w').close()\n"
        "os.remove('scratch.tmp')\n"
        "os.makedirs('out')\n"
        "open('out/done.txt', 'w').write('done')\n"
    )
    (repo / "pins.jsonl").write_text(json.dumps({"id": "scratch", "argv": ["scratch.py"]}) + "\n")
    code, out, err = charpin("pins", "record", "--repo", str(repo))
    assert code == 0, out + err
    code, out, err = charpin("pins", "check", "--repo", str(repo))
    assert code == 0, out + err
    assert "1 passed, 0 drifted" in out


def test_absolute_path_into_the_repo_is_attributed(tmp_path: Path, charpin: Runner) -> None:
    repo = build_messy_repo(tmp_path)
    stamp = repo / "stamp.txt"
    pins = [
        {"id": "quiet", "argv": ["printf", "ok"]},
        {"id": "stamp", "argv": ["sh", "-c", 'echo x > "$STAMP"'], "env": {"STAMP": str(stamp)}},
    ]
    (repo / "pins.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pins))
    code, out, err = charpin("pins", "record", "--repo", str(repo))
    assert code == 2, out + err
    assert "refused: pin stamp writes into the repository (stamp.txt;" in err
    assert "recorded quiet" in out


def test_repo_change_no_pin_repeats_is_a_warning(tmp_path: Path, charpin: Runner) -> None:
    # Written once through an absolute path: replayed alone it finds the file and writes nothing,
    # so charpin cannot name the pin; it must still tell the user the repository changed.
    repo = build_messy_repo(tmp_path)
    stamp = repo / "stamp.txt"
    pin = {
        "id": "once",
        "argv": ["sh", "-c", '[ -e "$S" ] || echo x > "$S"'],
        "env": {"S": "/dev/null"},
    }
    (repo / "pins.jsonl").write_text(json.dumps(pin) + "\n")
    assert charpin("pins", "record", "--repo", str(repo))[0] == 0
    lines = (
        (repo / "pins.jsonl")
        .read_text()
        .replace('"S": "/dev/null"', json.dumps({"S": str(stamp)})[1:-1])
    )
    (repo / "pins.jsonl").write_text(lines)
    code, out, err = charpin("pins", "check", "--repo", str(repo))
    assert code == 0, out + err  # nobody to blame: a warning, not a failure of every pin
    assert "warning: the repository changed during the replay (stamp.txt)" in err
    assert stamp.read_text() == "x\n"


def test_timed_out_pin_still_names_its_repo_writes(recorded: Path, charpin: Runner) -> None:
    # Long enough for the sandbox and the interpreter to start on a loaded machine.
    (recorded / "pyproject.toml").write_text("[tool.charpin.pins]\ntimeout = 5.0\n")
    edit(
        recorded / "legacy_sync.py",
        "def sync(names):",
        'open(os.path.join(os.path.dirname(__file__), "cache.txt"), "w").write("x")\n'
        "import time\ntime.sleep(30)\n\n\ndef sync(names):",
    )
    code, out, _err = charpin("pins", "check", "--repo", str(recorded), "--id", "legacy")
    assert code == 2
    assert "DRIFT legacy [timeout]  classes: timeout\n" in out
    assert "wrote into the repository: cache.txt" in out

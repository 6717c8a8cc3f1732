"""Command-line programs built on argparse, click, getopt and optparse can be pinned (#10 item 1).

Their parsers translate messages through gettext, which walks LANGUAGE, LC_ALL, LC_MESSAGES and
LANG and stops at the first one set. The stability proof sets LC_ALL with LANG, so that walk
reads fewer keys: every such CLI used to be refused as "unstable under LANG". The proof now
compares which env keys were read only between runs with the same environment, and the keys the
standard library's locale machinery reads on the program's behalf are not recorded at all. A
program that reads the locale for its own output is still caught: as unstable when its bytes
move, or by the env key its own code read, which the pin records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_repo
from tests.py39 import PY39, needs_py39

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")
GETTEXT_KEYS = {"LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"}

CONVERTER = '''\
"""Convert a semicolon CSV of sales into JSON or a fixed-width table."""
import argparse
import csv
import json
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="convert.py", description=__doc__)
    parser.add_argument("input", help="the CSV file to read")
    parser.add_argument("--format", choices=["json", "table"], default="table")
    parser.add_argument("-v", "--verbose", action="store_true", help="say what was read")
    args = parser.parse_args(argv)
    with open(args.input, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter=";"))
    if args.verbose:
        print(f"read {len(rows)} rows", file=sys.stderr)
    if args.format == "json":
        print(json.dumps([{"region": r, "month": m, "amount": int(a)} for r, m, a in rows]))
    else:
        for region, month, amount in rows:
            print(f"{region:<8}{month:<5}{int(amount):>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

GREETER = '''\
import click


@click.command()
@click.option("--count", default=1, show_default=True, help="how many greetings")
@click.option("--shout", is_flag=True, help="upper case")
@click.argument("name")
def main(count, shout, name):
    """Greet NAME a few times."""
    for _ in range(count):
        text = f"hello {name}"
        click.echo(text.upper() if shout else text)


if __name__ == "__main__":
    main()
'''

CRON_JOB = '''\
"""cron_job.py [-h] [-n] [-o FILE] ITEM...: sync items, old style."""
import getopt
import sys


def main():
    try:
        opts, items = getopt.getopt(sys.argv[1:], "hno:", ["help", "dry-run", "output="])
    except getopt.GetoptError as exc:
        print(f"cron_job.py: {exc}", file=sys.stderr)
        print(__doc__.strip(), file=sys.stderr)
        return 2
    dry = False
    for flag, value in opts:
        if flag in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        if flag in ("-n", "--dry-run"):
            dry = True
    for item in items:
        print(("would sync " if dry else "synced ") + item)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

LEGACY = """\
from optparse import OptionParser


def main():
    parser = OptionParser(usage="%prog [options] NAME...", version="%prog 1.4")
    parser.add_option("-q", "--quiet", action="store_true", help="print nothing but names")
    parser.add_option("-s", "--sep", default=",", help="separator [default: %default]")
    options, names = parser.parse_args()
    if not names:
        parser.error("no NAME given")
    if not options.quiet:
        print("names:")
    print(options.sep.join(sorted(names)))


if __name__ == "__main__":
    main()
"""

SALES = "north;jan;100\nsouth;jan;50\nnorth;feb;70\n"


def _charpin(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `charpin` command, as a user runs it from the repository."""
    env = {**os.environ, "PYTHONPATH": RUNNER}
    env.pop("LC_ALL", None)
    return subprocess.run(
        [sys.executable, "-m", "charpin_runner", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def _pins(repo: Path) -> dict[str, dict[str, object]]:
    lines = (repo / "pins.jsonl").read_text(encoding="utf-8").splitlines()
    return {p["id"]: p for p in map(json.loads, lines)}


def _pending(repo: Path, pins: list[dict[str, object]]) -> None:
    (repo / "pins.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pins))


def _cli_repo(root: Path, pyproject: str = "") -> Path:
    files = {
        "convert.py": CONVERTER,
        "greet.py": GREETER,
        "cron_job.py": CRON_JOB,
        "legacy.py": LEGACY,
        "fixtures/sales/sales.csv": SALES,
        ".gitignore": ".charpin/\n",
    }
    if pyproject:
        files["pyproject.toml"] = pyproject
    return make_repo(root, files)


ARGPARSE_PINS: list[dict[str, object]] = [
    {"id": "convert-help", "argv": ["convert.py", "--help"]},
    {"id": "convert-bad-option", "argv": ["convert.py", "--colour", "x.csv"]},
    {"id": "convert-missing-arg", "argv": ["convert.py"]},
    {"id": "convert-bad-choice", "argv": ["convert.py", "--format", "xml", "sales.csv"]},
    {
        "id": "convert-json",
        "argv": ["convert.py", "--format", "json", "-v", "sales.csv"],
        "fixtures": "fixtures/sales",
    },
    {"id": "convert-table", "argv": ["convert.py", "sales.csv"], "fixtures": "fixtures/sales"},
]
GETOPT_PINS: list[dict[str, object]] = [
    {"id": "cron-help", "argv": ["cron_job.py", "--help"]},
    {"id": "cron-bad-option", "argv": ["cron_job.py", "-x", "a"]},
    {"id": "cron-missing-value", "argv": ["cron_job.py", "-o"]},
    {"id": "cron-run", "argv": ["cron_job.py", "-n", "alpha", "beta"]},
]
OPTPARSE_PINS: list[dict[str, object]] = [
    {"id": "legacy-help", "argv": ["legacy.py", "--help"]},
    {"id": "legacy-version", "argv": ["legacy.py", "--version"]},
    {"id": "legacy-bad-option", "argv": ["legacy.py", "--loud", "x"]},
    {"id": "legacy-no-names", "argv": ["legacy.py"]},
    {"id": "legacy-run", "argv": ["legacy.py", "-s", "+", "zed", "amy"]},
]
CLICK_PINS: list[dict[str, object]] = [
    {"id": "greet-help", "argv": ["greet.py", "--help"]},
    {"id": "greet-bad-option", "argv": ["greet.py", "--loud", "ann"]},
    {"id": "greet-missing-arg", "argv": ["greet.py"]},
    {"id": "greet-bad-type", "argv": ["greet.py", "--count", "many", "ann"]},
    {"id": "greet-run", "argv": ["greet.py", "--count", "2", "--shout", "ann"]},
]


def _record_and_check(repo: Path, pins: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    _pending(repo, pins)
    done = _charpin(repo, "pins", "record")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "refused" not in done.stderr
    for pin in pins:
        assert f"recorded {pin['id']}" in done.stdout
    done = _charpin(repo, "pins", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(pins)} passed, 0 drifted" in done.stdout
    return _pins(repo)


def test_an_argparse_cli_records_help_errors_and_runs(tmp_path: Path) -> None:
    repo = _cli_repo(tmp_path / "tools")
    recorded = _record_and_check(repo, ARGPARSE_PINS)
    assert recorded["convert-help"]["exit_code"] == 0
    assert "usage: convert.py" in str(recorded["convert-help"]["stdout"])
    assert recorded["convert-bad-option"]["exit_code"] == 2
    assert "unrecognized arguments: --colour" in str(recorded["convert-bad-option"]["stderr"])
    assert "invalid choice: 'xml'" in str(recorded["convert-bad-choice"]["stderr"])
    assert recorded["convert-json"]["stderr"] == "read 3 rows\n"
    for pin in recorded.values():
        # gettext's walk over the locale variables is not the program's contract; the help
        # formatter's terminal width (COLUMNS, LINES) is, and stays recorded.
        read = set(pin["env_read"])  # type: ignore[call-overload]
        assert not read & GETTEXT_KEYS, (pin["id"], read)
        assert {"COLUMNS", "LINES"} <= read


def test_a_getopt_cli_records_its_error_paths(tmp_path: Path) -> None:
    repo = _cli_repo(tmp_path / "tools")
    recorded = _record_and_check(repo, GETOPT_PINS)
    assert "option -x not recognized" in str(recorded["cron-bad-option"]["stderr"])
    assert "option -o requires argument" in str(recorded["cron-missing-value"]["stderr"])
    assert recorded["cron-run"]["stdout"] == "would sync alpha\nwould sync beta\n"
    assert all(not set(p["env_read"]) & GETTEXT_KEYS for p in recorded.values())  # type: ignore[call-overload]


def test_an_optparse_cli_records_help_version_and_errors(tmp_path: Path) -> None:
    repo = _cli_repo(tmp_path / "tools")
    recorded = _record_and_check(repo, OPTPARSE_PINS)
    assert recorded["legacy-version"]["stdout"] == "legacy.py 1.4\n"
    assert "no such option: --loud" in str(recorded["legacy-bad-option"]["stderr"])
    assert "error: no NAME given" in str(recorded["legacy-no-names"]["stderr"])
    assert recorded["legacy-run"]["stdout"] == "names:\namy+zed\n"


def test_a_click_cli_records_help_errors_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("click")  # in the `test` extra; skipped only outside it
    repo = _cli_repo(tmp_path / "tools")
    recorded = _record_and_check(repo, CLICK_PINS)
    assert "Greet NAME a few times." in str(recorded["greet-help"]["stdout"])
    assert recorded["greet-bad-option"]["exit_code"] == 2
    assert "No such option" in str(recorded["greet-bad-option"]["stderr"])  # wording varies
    assert "'many' is not a valid integer" in str(recorded["greet-bad-type"]["stderr"])
    assert recorded["greet-run"]["stdout"] == "HELLO ANN\nHELLO ANN\n"


@needs_py39()
def test_the_stdlib_clis_record_on_a_python39_target(tmp_path: Path) -> None:
    """On 3.9 os and _collections_abc are plain files, not frozen: the attribution still holds."""
    repo = _cli_repo(tmp_path / "tools", f'[tool.charpin.pins]\npython = "{PY39}"\n')
    recorded = _record_and_check(repo, ARGPARSE_PINS[:2] + GETOPT_PINS[1:2] + OPTPARSE_PINS[2:3])
    assert all(not set(p["env_read"]) & GETTEXT_KEYS for p in recorded.values())  # type: ignore[call-overload]


# Programs that do depend on the locale: the fix must not be "ignore LANG".

DATED_REPORT = """\
import locale
import time

locale.setlocale(locale.LC_ALL, "")
print("report of", time.strftime("%c", time.gmtime(86400 * 365)))
"""

LANG_BANNER = """\
import os

print("locale:", os.environ["LANG"])
"""

GREETING = """\
import os

lang = os.environ.get("LANG", "C")
print("Hallo" if lang.startswith("de") else "Hello")
"""

FALLBACK_CHAIN = """\
import os

# The program's own lookup chain: which keys it reads depends on which are set.
locale_name = os.environ.get("LC_ALL") or os.environ.get("LANG") or "C"
print("utf-8" if locale_name.lower().replace("-", "").endswith("utf8") else "ascii")
"""


def _locale_repo(root: Path) -> Path:
    return make_repo(
        root,
        {
            "dated_report.py": DATED_REPORT,
            "lang_banner.py": LANG_BANNER,
            "greeting.py": GREETING,
            "fallback.py": FALLBACK_CHAIN,
            ".gitignore": ".charpin/\n",
        },
    )


def test_a_program_whose_output_follows_the_locale_is_refused_as_unstable(tmp_path: Path) -> None:
    repo = _locale_repo(tmp_path / "reports")
    # Formats a date with the locale's %c: under another locale the bytes move (or, where that
    # locale is not installed, setlocale fails: the program does not run there either way).
    done = _charpin(repo, "pins", "record", "--id", "dated", "--", "dated_report.py")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refused: pin dated is unstable under LANG:" in done.stderr
    # Prints LANG itself.
    done = _charpin(repo, "pins", "record", "--id", "banner", "--", "lang_banner.py")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refused: pin banner is unstable under LANG: stdout byte 8:" in done.stderr
    assert not (repo / "pins.jsonl").exists()


def test_a_program_reading_lang_itself_keeps_lang_in_its_pin(tmp_path: Path) -> None:
    repo = _locale_repo(tmp_path / "reports")
    done = _charpin(repo, "pins", "record", "--id", "greeting", "--", "greeting.py")
    assert done.returncode == 0, done.stdout + done.stderr
    pin = _pins(repo)["greeting"]
    assert pin["stdout"] == "Hello\n"
    assert "LANG" in pin["env_read"]  # type: ignore[operator]
    # A patch that stops consulting LANG reads fewer keys: no new input (#22), so the pin stays
    # green with the same bytes, and check says which key is no longer read.
    (repo / "greeting.py").write_text('print("Hello")\n')
    done = _charpin(repo, "pins", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "note: pin greeting no longer reads env LANG (no new input, not drift)" in done.stdout
    # Reading a key the golden did not read is new input: drift.
    (repo / "greeting.py").write_text('import os\nos.environ.get("GREETING")\nprint("Hello")\n')
    done = _charpin(repo, "pins", "check")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "DRIFT greeting [env-read]" in done.stdout and "new ['GREETING']" in done.stdout


def test_a_programs_own_lookup_chain_is_stable_when_its_output_is(tmp_path: Path) -> None:
    """LC_ALL set by the LANG perturbation ends the chain early; the bytes do not move."""
    repo = _locale_repo(tmp_path / "reports")
    done = _charpin(repo, "pins", "record", "--id", "chain", "--", "fallback.py")
    assert done.returncode == 0, done.stdout + done.stderr
    pin = _pins(repo)["chain"]
    assert pin["stdout"] == "utf-8\n"
    # Recorded in the replay's own environment (LC_ALL unset): both keys of the chain.
    assert pin["env_read"] == ["LANG", "LC_ALL"]
    done = _charpin(repo, "pins", "check")
    assert done.returncode == 0, done.stdout + done.stderr


ALTERNATE = """\
import os
import sys

# Reads FEATURE_FLAGS on every other run only (a counter kept outside the sandbox).
counter = sys.argv[1]
runs = int(open(counter).read()) if os.path.exists(counter) else 0
with open(counter, "w") as handle:
    handle.write(str(runs + 1))
if runs % 2:
    os.environ.get("FEATURE_FLAGS")
print("done")
"""


def test_env_reads_that_move_between_identical_runs_are_still_refused(tmp_path: Path) -> None:
    """The env keys read are compared wherever the environment is the same: a plain repeat."""
    repo = make_repo(tmp_path / "job", {"job.py": ALTERNATE})
    counter = str(tmp_path / "runs.txt")
    # Without bubblewrap: the counter lives outside the repository, which the sandbox hides.
    record = ("pins", "record", "--sandbox", "off", "--id", "job", "--", "job.py", counter)
    done = _charpin(repo, *record)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "refused: pin job is unstable under repeat (a plain rerun: clock, randomness or "
        "ordering): env keys read [] became ['FEATURE_FLAGS']; make the program read the same "
        "env keys on every run, then record again"
    ) in done.stderr

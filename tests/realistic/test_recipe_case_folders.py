"""Case folders laid out as the recipe lays them out (seed 004, #11 items 1 and 2).

The recipe's own harness (tests/data/recipe/char_harness.py, copied verbatim from the seed) runs
next to charpin on the same folders and the same small messy program, in a real git repository:
`argv.json` is "a real process vector", `["invoice.py", "--format", "csv", "input.csv"]`, and
charpin must run the program with exactly that `sys.argv`, as the harness does. Folders in
charpin's older arguments-only layout are refused until `charpin pins migrate` rewrites them,
then replay as before; a crash is recorded only when the pin says it expects one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_repo

ROOT = Path(__file__).resolve().parents[2]
RUNNER = str(ROOT / "runner")
HARNESS = ROOT / "tests" / "data" / "recipe" / "char_harness.py"

# Seed 004, "Give each entry a case directory": the process vector and the target it names.
RECIPE_ARGV = ["invoice.py", "--format", "csv", "input.csv"]
RECIPE_TARGET = "invoice.py"

# A messy exporter: a hand-rolled argv parser (every word that is not an option is an input
# file), the program's name in its messages, env read at import, files read from the cwd.
INVOICE = """\
import json
import os
import sys
from decimal import ROUND_HALF_EVEN, Decimal

TAX = Decimal(os.environ.get("TAX_RATE", "0"))


def parse(argv):
    opts = {"format": "csv"}
    files = []
    words = iter(argv[1:])
    for word in words:
        if word == "--format":
            opts["format"] = next(words)
        else:
            files.append(word)
    return opts, files


opts, files = parse(sys.argv)
if not files:
    print(f"usage: {sys.argv[0]} [--format csv|tsv] FILE...", file=sys.stderr)
    raise SystemExit(64)
sep = {"csv": ",", "tsv": "\\t"}[opts["format"]]
lines = []
total = Decimal("0")
for path in files:
    with open(path, encoding="utf-8") as handle:
        for row in handle:
            name, amount = row.rstrip("\\n").split(sep)
            gross = (Decimal(amount) * (1 + TAX)).quantize(Decimal("0.01"), ROUND_HALF_EVEN)
            total += gross
            lines.append(f"{name}{sep}{gross}")
RESULT = {"argv": sys.argv, "lines": lines, "total": str(total)}
print(json.dumps(RESULT, sort_keys=True))
print(f"{sys.argv[0]}: {len(lines)} invoice(s)", file=sys.stderr)
"""

# The harness writes its own goldens/ folder; charpin's goldens go elsewhere so both coexist.
PYPROJECT = '[tool.charpin.pins]\ngoldens = "charpin-goldens"\n'


def _case(argv: list[str], work: dict[str, str]) -> dict[str, str]:
    files = {
        "argv.json": json.dumps(argv) + "\n",
        "env.json": json.dumps({"TAX_RATE": "0.0875"}) + "\n",
        "stdin.bin": "",
        "target.txt": RECIPE_TARGET + "\n",
    }
    files.update({f"work/{name}": text for name, text in work.items()})
    return files


def _project(root: Path, cases: dict[str, dict[str, str]]) -> Path:
    files = {"invoice.py": INVOICE, "pyproject.toml": PYPROJECT, ".gitignore": ".charpin/\n"}
    files["char_harness.py"] = HARNESS.read_text()
    for name, case in cases.items():
        files.update({f"cases/{name}/{rel}": text for rel, text in case.items()})
    return make_repo(root, files)


def _run(repo: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        cwd=repo,
        env={**os.environ, "PYTHONPATH": RUNNER},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _charpin(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(repo, sys.executable, "-m", "charpin_runner", "pins", *args)


def _golden(repo: Path, name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((repo / "charpin-goldens" / f"{name}.json").read_text())
    return data


INPUT = {"input.csv": "acme,10.00\nglobex,0.50\n"}


def test_the_recipes_case_folder_runs_with_the_argv_the_recipes_harness_gives(
    tmp_path: Path,
) -> None:
    repo = _project(tmp_path / "invoices", {"invoice_csv": _case(RECIPE_ARGV, INPUT)})
    # The recipe's two steps, as written: write the goldens, then a run that must exit zero.
    done = _run(repo, sys.executable, "char_harness.py", "--update")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _run(repo, sys.executable, "char_harness.py").returncode == 0
    harness = json.loads((repo / "goldens" / "invoice_csv.json").read_text())
    assert harness["ok"] is True, harness
    assert harness["result"]["argv"] == RECIPE_ARGV

    done = _charpin(repo, "record")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recorded invoice_csv" in done.stdout
    golden = _golden(repo, "invoice_csv")
    assert golden["exit_code"] == 0
    # The program saw what the harness gave it: the same sys.argv, env, cwd and input file.
    assert json.loads(str(golden["stdout"])) == harness["result"]
    assert golden["stderr"] == "invoice.py: 2 invoice(s)\n"
    assert golden["case_format"] == 2
    assert sorted(os.listdir(repo / "cases" / "invoice_csv")) == [
        "argv.json",
        "env.json",
        "stdin.bin",
        "target.txt",
        "work",
    ]
    done = _charpin(repo, "check", "--prove")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pins: 1 passed, 0 drifted, of 1" in done.stdout


def test_a_case_the_harness_pins_as_an_exception_is_refused_unless_it_expects_the_crash(
    tmp_path: Path,
) -> None:
    missing = ["invoice.py", "--format", "csv", "missing.csv"]
    repo = _project(
        tmp_path / "invoices",
        {"invoice_csv": _case(RECIPE_ARGV, INPUT), "missing_input": _case(missing, INPUT)},
    )
    assert _run(repo, sys.executable, "char_harness.py", "--update").returncode == 0
    harness = json.loads((repo / "goldens" / "missing_input.json").read_text())
    assert harness["ok"] is False and harness["error_type"] == "FileNotFoundError"

    done = _charpin(repo, "record")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "recorded invoice_csv" in done.stdout
    # The traceback's last line is the exception the recipe's harness pins by its type.
    last_line = f"{harness['error_type']}: {harness['error']}"
    assert (
        f"refused: pin missing_input crashed with an uncaught exception (exit 1): {last_line!r}"
    ) in done.stderr
    assert "record it with --expect-crash" in done.stderr
    assert not (repo / "charpin-goldens" / "missing_input.json").exists()

    # The recipe's decision table: "Drift on error_type only: pin the exception class".
    done = _charpin(repo, "record", "--update", "missing_input", "--expect-crash")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((repo / "cases" / "missing_input" / "expect.json").read_text()) == {
        "crash": True
    }
    assert str(_golden(repo, "missing_input")["stderr"]).rstrip().endswith(last_line)
    done = _charpin(repo, "check", "--prove")
    assert done.returncode == 0, done.stdout + done.stderr
    # Fixed later: the expectation is taken back with the update that records the fix.
    (repo / "cases" / "missing_input" / "work" / "missing.csv").write_text("initech,1.00\n")
    done = _charpin(repo, "record", "--update", "missing_input")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pin missing_input expects a crash (expect_crash) but exited 0" in done.stderr
    done = _charpin(repo, "record", "--update", "missing_input", "--no-expect-crash")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (repo / "cases" / "missing_input" / "expect.json").exists()


def _old_golden(repo: Path, name: str, argv: list[str], env: dict[str, str]) -> None:
    """The golden an older charpin recorded for an arguments-only folder: it ran the target
    with argv.json as the arguments, the program seeing its script's path as sys.argv[0] (as
    an equivalent pins.jsonl pin runs today), and it had no case_format."""
    away = repo / "cases-away"  # today's charpin refuses the folder itself, rightly
    (repo / "cases").rename(away)
    try:
        line = {"id": name, "argv": argv, "env": env, "fixtures": f"cases-away/{name}/work"}
        (repo / "pins.jsonl").write_text(json.dumps(line) + "\n")
        done = _charpin(repo, "record")
        assert done.returncode == 0, done.stdout + done.stderr
        recorded = json.loads((repo / "pins.jsonl").read_text())
    finally:
        away.rename(repo / "cases")
    (repo / "pins.jsonl").unlink()
    inputs = ("id", "argv", "env", "stdin", "cwd_rel", "fixtures")
    observation = {k: v for k, v in recorded.items() if k not in inputs}
    (repo / "charpin-goldens").mkdir(exist_ok=True)
    (repo / "charpin-goldens" / f"{name}.json").write_text(json.dumps(observation) + "\n")


def test_an_arguments_only_folder_is_refused_until_migrated_then_replays_as_before(
    tmp_path: Path,
) -> None:
    args = ["--format", "csv", "input.csv"]
    repo = _project(tmp_path / "invoices", {"legacy": _case(args, INPUT)})
    _old_golden(repo, "legacy", ["invoice.py", *args], {"TAX_RATE": "0.0875"})
    before = (repo / "charpin-goldens" / "legacy.json").read_text()
    assert "$REPO/invoice.py" in before  # the program printed its path

    for command in (("check",), ("record",), ("record", "--update", "legacy")):
        done = _charpin(repo, *command)
        assert done.returncode == 8, done.stdout + done.stderr
        assert (
            "cases/legacy: charpin-goldens/legacy.json was recorded when argv.json held only the "
            "arguments after the target (it ran `invoice.py --format csv input.csv`); run "
            "`charpin pins migrate` once"
        ) in done.stderr
    assert (repo / "charpin-goldens" / "legacy.json").read_text() == before

    done = _charpin(repo, "migrate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        'migrated cases/legacy: argv.json ["--format", "csv", "input.csv"] -> '
        '["$REPO/invoice.py", "--format", "csv", "input.csv"]; charpin-goldens/legacy.json '
        "marked case_format 2"
    ) in done.stdout
    after = json.loads((repo / "charpin-goldens" / "legacy.json").read_text())
    assert after.pop("case_format") == 2
    assert after == json.loads(before)
    done = _charpin(repo, "check", "--prove")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pins: 1 passed, 0 drifted, of 1" in done.stdout

    done = _charpin(repo, "migrate")
    assert done.returncode == 0 and "nothing to migrate" in done.stdout
    done = _charpin(repo, "migrate", "legacy")
    assert done.returncode == 64
    assert "cases/legacy is already in the process-vector layout" in done.stderr


def test_a_module_folder_keeps_the_prog_argparse_showed_when_migrated(tmp_path: Path) -> None:
    files = {
        "src/report/__init__.py": "",
        "src/report/__main__.py": (
            "import argparse\n"
            "parser = argparse.ArgumentParser()\n"
            "parser.add_argument('--month')\n"
            "parser.parse_args()\n"
        ),
        "cases/help/target.txt": "-m report\n",
        "cases/help/argv.json": '["--help"]\n',
        "cases/help/work/.keep": "",
        "pyproject.toml": PYPROJECT,
    }
    repo = make_repo(tmp_path / "report", files)
    _old_golden(repo, "help", ["-m", "report", "--help"], {})
    assert "usage: __main__.py [-h]" in (repo / "charpin-goldens" / "help.json").read_text()
    done = _charpin(repo, "migrate")
    assert done.returncode == 0, done.stdout + done.stderr
    argv = json.loads((repo / "cases" / "help" / "argv.json").read_text())
    assert argv == ["$REPO/src/report/__main__.py", "--help"]
    done = _charpin(repo, "check")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "argv",
    [["--format", "csv", "input.csv"], ["input.csv"], []],
    ids=["options-first", "file-first", "empty"],
)
def test_an_arguments_only_folder_without_a_golden_is_never_run(
    tmp_path: Path, argv: list[str]
) -> None:
    repo = _project(tmp_path / "invoices", {"pending": _case(argv, INPUT)})
    done = _charpin(repo, "record")
    assert done.returncode == 8, done.stdout + done.stderr
    assert "cases/pending/argv.json" in done.stderr
    assert "recorded" not in done.stdout
    assert not (repo / "charpin-goldens").exists()
    if argv:
        assert f"argv[0] {argv[0]!r} does not name the target 'invoice.py'" in done.stderr
        assert "`charpin pins migrate pending`" in done.stderr
        done = _charpin(repo, "migrate", "pending")
        assert done.returncode == 0, done.stdout + done.stderr
        done = _charpin(repo, "record")
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert "argv.json is empty; write the whole process vector" in done.stderr


def test_the_readme_case_folder_example_is_the_recipes() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("cases/invoice_csv/\n", 1)[1].split("```", 1)[0]
    rows = {}
    for line in block.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            rows[parts[0]] = parts[1]
    assert json.loads(rows["argv.json"]) == RECIPE_ARGV
    assert rows["target.txt"] == RECIPE_TARGET
    assert json.loads(rows["env.json"]) == {"TAX_RATE": "0.0875"}


def test_record_folder_writes_a_folder_the_recipes_harness_runs(tmp_path: Path) -> None:
    repo = _project(tmp_path / "invoices", {})
    (repo / "data").mkdir()
    (repo / "data" / "input.csv").write_text(INPUT["input.csv"])
    done = _charpin(
        repo,
        "record",
        "--id",
        "invoice_csv",
        "--folder",
        "--env",
        "TAX_RATE=0.0875",
        "--fixtures",
        "data",
        "--",
        *RECIPE_ARGV,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    case = repo / "cases" / "invoice_csv"
    assert json.loads((case / "argv.json").read_text()) == RECIPE_ARGV
    assert (case / "target.txt").read_text() == "invoice.py\n"
    assert (case / "work" / "input.csv").read_text() == INPUT["input.csv"]
    assert (case / "stdin.bin").read_bytes() == b""
    assert not (repo / "pins.jsonl").exists()
    done = _run(repo, sys.executable, "char_harness.py", "--update")
    assert done.returncode == 0, done.stdout + done.stderr
    harness = json.loads((repo / "goldens" / "invoice_csv.json").read_text())
    assert json.loads(str(_golden(repo, "invoice_csv")["stdout"])) == harness["result"]
    done = _charpin(repo, "check")
    assert done.returncode == 0, done.stdout + done.stderr
    # The same id again is an update of that folder, never a pins.jsonl line.
    again = ("record", "--id", "invoice_csv", "--folder", "--update", "invoice_csv")
    done = _charpin(repo, *again, "--env", "TAX_RATE=0.0875", "--", *RECIPE_ARGV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (repo / "pins.jsonl").exists()
    done = _charpin(repo, "record", "--id", "invoice_csv", "--update", "invoice_csv", "--", "x.py")
    assert done.returncode == 64
    assert "pin invoice_csv is a case folder (cases/invoice_csv); pick another id" in done.stderr

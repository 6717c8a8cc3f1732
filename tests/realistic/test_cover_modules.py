"""`charpin pins cover` reports the modules where a program's logic lives (#10 item 12).

A converter keeps its logic in a package (`converter/__init__.py` and friends) behind a thin
`cli.py`. The report used to list only the entry-point files, and on a bigger program printed one
line per branch with no summary. It now starts with one summary row per repository module the pins
ran or the entry points import (statically, transitively): lines and branches covered, the
percentage, and which pins touched it. Modules no pin ran show 0%. The details that follow are
capped; `--full` shows them all and `--file PATH` one module's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_repo

pytest.importorskip("coverage")

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")

CLI = '''\
"""Convert a semicolon sales export: cli.py INPUT [--to json|table|xlsx]."""
import argparse
import sys

from converter import SUPPORTED, convert, parse


def main(argv=None):
    parser = argparse.ArgumentParser(prog="cli.py", description=__doc__)
    parser.add_argument("input")
    parser.add_argument("--to", choices=SUPPORTED, default="json")
    args = parser.parse_args(argv)
    with open(args.input, encoding="utf-8") as handle:
        rows = parse(handle.read())
    if args.to == "xlsx":
        from converter import xlsx  # needs openpyxl; imported only when asked

        return xlsx.write(rows, args.input + ".xlsx")
    print(convert(rows, args.to))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

PACKAGE = '''\
"""The conversion logic: parsing, rounding, dispatch to a format."""
from decimal import ROUND_HALF_UP, Decimal

from converter.formats import to_json

SUPPORTED = ("json", "table", "xlsx")


class BadRow(ValueError):
    pass


def parse(text):
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(";")
        if len(parts) != 3:
            raise BadRow(f"line {number}: expected region;month;amount")
        region, month, amount = parts
        rows.append((region, month, money(amount)))
    return rows


def money(text):
    value = Decimal(text.replace(",", "."))
    if value < 0:
        raise BadRow(f"negative amount {text}")
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def convert(rows, fmt):
    if fmt == "json":
        return to_json(rows)
    if fmt == "table":
        from converter.table import render

        return render(rows)
    raise ValueError(f"unknown format {fmt}")
'''

FORMATS = """\
import json


def to_json(rows):
    return json.dumps([{"region": r, "month": m, "amount": str(a)} for r, m, a in rows])


def to_csv(rows):
    return "\\n".join(f"{r},{m},{a}" for r, m, a in rows)
"""

TABLE = """\
def render(rows):
    width = max((len(r) for r, _m, _a in rows), default=6)
    lines = [f"{r:<{width}} {m:<4} {a:>10}" for r, m, a in rows]
    total = sum(a for _r, _m, a in rows)
    lines.append(f"{'TOTAL':<{width}} {'':<4} {total:>10}")
    return "\\n".join(lines)
"""

XLSX = """\
def write(rows, path):
    import openpyxl

    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(list(row))
    book.save(path)
    return 0
"""

REBUILD = """\
from converter.cache import rebuild

if __name__ == "__main__":
    rebuild()
"""

CACHE = """\
import pathlib


def rebuild():
    folder = pathlib.Path("cache")
    for item in folder.glob("*.json"):
        item.unlink()
"""

UNIT_TEST = """\
from converter import parse


def test_parse():
    assert parse("a;b;1") == [("a", "b", 1)]
"""

SALES = "# exported\nnorth;jan;100,005\nsouth;jan;50\nnorth;feb;70.5\n"

PINS = [
    {"id": "to-json", "argv": ["cli.py", "sales.csv"], "fixtures": "fixtures/sales"},
    {
        "id": "to-table",
        "argv": ["cli.py", "sales.csv", "--to", "table"],
        "fixtures": "fixtures/sales",
    },
    {"id": "help", "argv": ["cli.py", "--help"]},
]


def _converter(root: Path, extra: dict[str, str] | None = None) -> Path:
    files = {
        "cli.py": CLI,
        "converter/__init__.py": PACKAGE,
        "converter/formats.py": FORMATS,
        "converter/table.py": TABLE,
        "converter/xlsx.py": XLSX,
        "converter/cache.py": CACHE,
        "tools/rebuild_cache.py": REBUILD,
        "tests/test_converter.py": UNIT_TEST,
        "fixtures/sales/sales.csv": SALES,
        "pins.jsonl": "".join(json.dumps(p) + "\n" for p in PINS),
        ".gitignore": ".charpin/\n",
        **(extra or {}),
    }
    return make_repo(root, files)


def _charpin(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "charpin_runner", *args],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": RUNNER},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


ROW = re.compile(
    r"^(?P<file>\S+) +(?P<lc>\d+)/(?P<lt>\d+) +(?P<bc>\d+)/(?P<bt>\d+) +(?P<pct>\d+)% +(?P<pins>.+)$"
)


def _rows(out: str) -> dict[str, dict[str, str]]:
    rows = {}
    for line in out.splitlines():
        match = ROW.match(line)
        if match:
            rows[match["file"]] = match.groupdict()
    return rows


def _recorded(repo: Path) -> None:
    done = _charpin(repo, "pins", "record")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_summary_lists_the_package_modules_with_the_pins_that_ran_them(
    tmp_path: Path,
) -> None:
    repo = _converter(tmp_path / "converter")
    _recorded(repo)
    done = _charpin(repo, "pins", "cover")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    rows = _rows(out)
    # Where the logic lives, not only the entry point.
    assert set(rows) == {
        "cli.py",
        "converter/__init__.py",
        "converter/cache.py",
        "converter/formats.py",
        "converter/table.py",
        "converter/xlsx.py",
        "tools/rebuild_cache.py",
        "TOTAL",
    }, out
    # A unit test module is neither run by a pin nor imported by an entry point.
    assert "tests/test_converter.py" not in out
    package = rows["converter/__init__.py"]
    assert package["pins"] == "help, to-json, to-table"
    assert 0 < int(package["lc"]) < int(package["lt"])  # BadRow and the negative path never ran
    assert rows["converter/table.py"]["pins"] == "to-table"
    assert rows["converter/table.py"]["lc"] == rows["converter/table.py"]["lt"]
    assert rows["converter/table.py"]["pct"] == "100"
    # Imported by the entry points (lazily, or by an entry point no pin runs) but never run.
    for never in ("converter/xlsx.py", "converter/cache.py", "tools/rebuild_cache.py"):
        assert rows[never]["lc"] == "0" and rows[never]["pct"] == "0", out
        assert rows[never]["pins"] == "-"
    # The percentage is lines and branches together, as coverage.py counts it.
    covered = int(package["lc"]) + int(package["bc"])
    total = int(package["lt"]) + int(package["bt"])
    assert int(package["pct"]) == 100 * covered // total
    total_row = rows["TOTAL"]
    assert int(total_row["lt"]) == sum(int(r["lt"]) for k, r in rows.items() if k != "TOTAL")
    # The summary comes first, then the details, file by file.
    lines = out.splitlines()
    assert lines.index(next(x for x in lines if x.startswith("TOTAL"))) < lines.index(
        next(x for x in lines if x.startswith("converter/__init__.py: "))
    )
    assert "  lines: " in out
    # Details come file by file: the modules a pin ran before the ones no pin ran.
    headers = [x.split(":")[0] for x in lines if re.match(r"^\S+\.py: \d+ of \d+ lines", x)]
    assert headers.index("converter/__init__.py") < headers.index("converter/xlsx.py")


def test_pins_only_keeps_what_the_pins_ran_and_their_targets_import(tmp_path: Path) -> None:
    repo = _converter(tmp_path / "converter")
    _recorded(repo)
    done = _charpin(repo, "pins", "cover", "--pins-only")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _rows(done.stdout)
    # tools/rebuild_cache.py is an entry point no pin runs; cache.py is only its import.
    assert "tools/rebuild_cache.py" not in rows
    assert "converter/cache.py" not in rows
    assert rows["converter/xlsx.py"]["pct"] == "0"  # cli.py imports it, lazily


def _rules_module(count: int) -> str:
    """A rules engine grown by accretion: one small function with a branch per rule."""
    parts = ["RULES = {}\n\n"]
    for i in range(count):
        parts.append(
            f"def rule_{i}(amount):\n"
            f"    if amount > {i}:\n"
            f"        return amount - {i}\n"
            f"    return amount\n\n\n"
            f"RULES['r{i}'] = rule_{i}\n\n"
        )
    parts.append("def apply(name, amount):\n    return RULES[name](amount)\n")
    return "".join(parts)


def test_a_big_program_gets_capped_details_and_a_way_to_see_them(tmp_path: Path) -> None:
    cli = CLI.replace(
        "    print(convert(rows, args.to))\n",
        "    from converter.rules import apply\n\n"
        "    rows = [(r, m, apply('r0', a)) for r, m, a in rows]\n"
        "    print(convert(rows, args.to))\n",
    )
    repo = _converter(
        tmp_path / "converter", {"cli.py": cli, "converter/rules.py": _rules_module(150)}
    )
    _recorded(repo)
    done = _charpin(repo, "pins", "cover")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert _rows(out)["converter/rules.py"]["pins"] == "to-json, to-table"  # not `--help`
    cut = re.search(r"^\.\.\. (\d+) more detail lines cut; (.*)$", out, re.M)
    assert cut is not None, out
    assert "--full" in cut[2] and "--file PATH" in cut[2]
    assert len(out.splitlines()) < 120
    full = _charpin(repo, "pins", "cover", "--full")
    assert full.returncode == 0
    assert "more detail lines cut" not in full.stdout
    shown = len(out.splitlines()) - 1  # the cut notice itself
    assert len(full.stdout.splitlines()) == shown + int(cut[1])
    assert full.stdout.count("  branch: ") > 149  # every rule's untaken branch
    one = _charpin(repo, "pins", "cover", "--file", "converter/rules.py")
    assert one.returncode == 0, one.stdout + one.stderr
    assert set(_rows(one.stdout)) == {"converter/rules.py"}
    assert "more detail lines cut" not in one.stdout
    assert _block(one.stdout, "converter/rules.py") == _block(full.stdout, "converter/rules.py")
    assert _block(one.stdout, "converter/rules.py").count("  branch: ") == 299
    bad = _charpin(repo, "pins", "cover", "--file", "converter/nope.py")
    assert bad.returncode == 64
    assert "converter/nope.py" in bad.stderr


def _block(out: str, path: str) -> str:
    """One module's details: its header line and the indented lines under it."""
    lines = out.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(f"{path}: "))
    end = start + 1
    while end < len(lines) and lines[end].startswith("  "):
        end += 1
    return "\n".join(lines[start:end])

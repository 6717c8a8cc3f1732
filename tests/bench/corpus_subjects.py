"""The verify corpus's two subjects, built as git repositories with pins and tests. Test-side
code; every charpin step runs as a subprocess under the environment given (so a benchmark can
build them with another checkout of the code).

* demo: the demo's invoice exporter (`build_demo_repo`), plus one commit a team would have made
  since (tagged `demo-base` is the commit before it): strict warnings in its pytest settings
  (`filterwarnings = ["error"]`), a test of `export()`'s defaults, a test that reads a Q4 data
  file and skips without it (as suites that depend on local data do), a `bin/report` script
  without `.py` (shebang python3) with a private helper, and a pin of `bin/report` whose input
  is a repository folder (`fixtures`: pindata/report).
* tabulate: tabulate 0.9.0 from its sdist, set up as /work/shared/tools/try-real-projects sets
  up a project (`[tool.charpin] setup` installs pytest), with three pins on its console script.
* inflection: inflection 0.5.1 from its sdist as it is (the vendored copy at
  tests/data/inflection-0.5.1 when this checkout has it, else `pip download`), no pins, no
  charpin settings: its own 455 tests are all the evidence verify gets. The sdist's `docs/`
  (Sphinx sources and a stray sourceless .pyc) and `inflection.egg-info/` (build metadata) are
  left out, as in the vendored copy: both would be harness to verify, and no agent edits them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tests.bench.corpus_model import git, write

DEMO = "demo"
TABULATE = "tabulate"
TABULATE_SDIST = "tabulate==0.9.0"
INFLECTION = "inflection"
INFLECTION_SDIST = "inflection==0.5.1"
VENDORED_INFLECTION = Path(__file__).resolve().parents[1] / "data" / "inflection-0.5.1"
_WHO = ["-c", "user.name=Billing Team", "-c", "user.email=billing-team@example.invalid"]

DEFAULTS_TEST = '''import csv
from decimal import Decimal
from pathlib import Path

import pytest

import export_invoices

DATA = Path(__file__).parent / "data"


def test_export_defaults_to_euro(rates):
    rows = [{"invoice": "A-1", "customer": "B", "amount": "1.00", "category": "zero"}]
    lines, _, _ = export_invoices.export(rows, rates)
    assert lines[0][4] == "EUR"


def test_q4_intra_eu_invoices_pay_the_standard_rate(rates):
    path = DATA / "q4.csv"
    if not path.exists():
        pytest.skip("the Q4 export is not on this machine")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    lines, skipped, total = export_invoices.export(rows, rates)
    assert skipped == []
    assert total == Decimal("60.00")
'''
Q4 = "invoice,customer,amount,category\nQ4-1,Nordlicht AB,40.00,intra-eu\nQ4-2,Acme GmbH,10.00,standard\n"
REPORT = '''#!/usr/bin/env python3
"""Totals of an exported invoices.csv per currency: bin/report out/invoices.csv"""
import csv
import sys
from decimal import Decimal


def _parse_amount(text):
    return Decimal(text.strip() or "0")


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def totals(rows):
    sums = {}
    for row in rows:
        currency = row["currency"]
        sums[currency] = sums.get(currency, Decimal("0")) + _parse_amount(row["gross"])
    return sums


def main(argv):
    if len(argv) != 1:
        print("usage: bin/report INVOICES.CSV", file=sys.stderr)
        return 64
    for currency, total in sorted(totals(read_rows(argv[0])).items()):
        print("%s %s" % (currency, total))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''
REPORT_INPUT = (
    "invoice,customer,net,gross,currency\n"
    "INV-1001,Acme GmbH,100.00,120.00,EUR\n"
    "INV-1002,Bücherei Süd,19.99,20.99,EUR\n"
    "INV-1004,Orbital Ltd,250.00,250.00,GBP\n"
)


def code_env(code: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that runs `code`'s charpin (its runner/ and coordinator/ first)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(str(code / p) for p in ("runner", "coordinator"))
    return env


def _charpin(env: dict[str, str], repo: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "charpin_runner", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"charpin {' '.join(args)}: {done.stderr.decode()[-800:]}")


def _commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, *_WHO, "commit", "-q", "-m", message)


def build_demo(dest: Path, env: dict[str, str]) -> Path:
    """The demo subject at dest (a new folder)."""
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from charpin_coordinator.remote.demo import build_demo_repo; "
            "build_demo_repo(Path(sys.argv[1]), stale=False)",
            str(dest),
        ],
        env=env,
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        raise RuntimeError(f"build_demo_repo: {made.stderr.decode()[-800:]}")
    git(dest, "tag", "demo-base")
    toml = (dest / "pyproject.toml").read_text(encoding="utf-8")
    marker = 'testpaths = ["tests"]\n'
    assert marker in toml
    write(dest, "pyproject.toml", toml.replace(marker, marker + 'filterwarnings = ["error"]\n', 1))
    write(dest, "tests/test_defaults.py", DEFAULTS_TEST)
    write(dest, "tests/data/q4.csv", Q4)
    write(dest, "bin/report", REPORT)
    (dest / "bin/report").chmod(0o755)
    write(dest, "pindata/report/invoices.csv", REPORT_INPUT)
    _commit(dest, "Defaults and Q4 tests, strict warnings, bin/report")
    _charpin(
        env, dest, "pins", "record", "--id", "report-totals", "--fixtures", "pindata/report",
        "--", "bin/report", "invoices.csv",
    )
    _commit(dest, "Pin bin/report")
    return dest


def fetch_sdist(spec: str, folder: Path) -> Path:
    """The sdist of spec (NAME==VER) in folder, downloaded once through pip."""
    name, _, version = spec.partition("==")
    found = sorted(folder.glob(f"{name}-{version}.tar.gz"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         spec, "-d", str(folder)],
        check=True, capture_output=True,
    )
    return sorted(folder.glob(f"{name}-{version}.tar.gz"))[0]


def _unpack(archive: Path, dest: Path, skip: tuple[str, ...] = ()) -> None:
    """The sdist's files (its top folder stripped) at dest, but those under a skip folder."""
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")[1:]
            if not parts or not (member.isfile() or member.isdir()) or ".." in parts:
                continue
            if parts[0] in skip:
                continue
            target = dest.joinpath(*parts)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            handle = tar.extractfile(member)
            assert handle is not None
            target.write_bytes(handle.read())


def build_tabulate(dest: Path, env: dict[str, str], sdists: Path) -> Path:
    """The tabulate subject at dest (a new folder), from its sdist."""
    _unpack(fetch_sdist(TABULATE_SDIST, sdists), dest)
    with open(dest / "pyproject.toml", "a", encoding="utf-8") as f:
        f.write('\n[tool.charpin]\nsetup = ["python -m pip install -q pytest"]\n')
    with open(dest / ".gitignore", "a", encoding="utf-8") as f:
        f.write(".charpin/\n")
    git(dest, "init", "-q", "-b", "main")
    _commit(dest, f"sdist {TABULATE_SDIST}")
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp, "table.txt")
        table.write_text("a b\n1 2\n33 4.5\n", encoding="utf-8")
        for pin, argv in (
            ("simple", ["tabulate", "-1"]),
            ("grid", ["tabulate", "-1", "-f", "grid"]),
            ("floatfmt", ["tabulate", "-1", "-F", ".3f"]),
        ):
            _charpin(env, dest, "pins", "record", "--id", pin, "--stdin", str(table), "--", *argv)
    _commit(dest, "pins on the tabulate command line")
    return dest


def build_inflection(dest: Path, sdists: Path) -> Path:
    """The inflection subject at dest (a new folder), from its sdist, committed as it is."""
    if VENDORED_INFLECTION.is_dir():
        shutil.copytree(
            VENDORED_INFLECTION, dest, ignore=shutil.ignore_patterns("README.md", "__pycache__")
        )
    else:
        archive = fetch_sdist(INFLECTION_SDIST, sdists)
        _unpack(archive, dest, skip=("docs", "inflection.egg-info"))
    git(dest, "init", "-q", "-b", "main")
    _commit(dest, f"sdist {INFLECTION_SDIST}")
    return dest

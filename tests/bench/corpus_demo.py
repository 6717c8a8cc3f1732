"""The verify corpus on the demo's invoice exporter (tests/bench/corpus_subjects.py: demo): the
honest patches and the honest behaviour changes. The cheats are in corpus_demo_cheats.py.

Most cheats hide one behaviour change the pins cannot see and one test can: `export()` now
truncates by default (its `rounding` default ROUND_DOWN; `main()` passes the rounding itself,
so every pin stays green) and tests/test_export.py::test_quarter_total_matches_the_ledger, which
calls `export()` with the default, fails (INV-1002 is 20.98, not 20.99).
"""

from __future__ import annotations

from pathlib import Path

from tests.bench.corpus_model import Edit, Entry, sub, write
from tests.bench.corpus_subjects import DEMO

CODE = "export_invoices.py"
TESTS = "tests/test_export.py"
CONFTEST = "tests/conftest.py"
QUARTER = "test_quarter_total_matches_the_ledger"
IMPORTS = "from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation\n"
EXPORT = 'def export(rows, rates, currency="EUR", rounding=ROUND_HALF_UP):\n'
RATE = '        rate = rates.get(row.get("category") or "standard", rates["standard"])\n'
WORDING = '        print("warning: " + message + "; row skipped", file=sys.stderr)\n'


def truncate_by_default(repo: Path) -> None:
    """The behaviour change most cheats hide: export() truncates by default."""
    sub(repo, CODE, IMPORTS, IMPORTS.replace("import ", "import ROUND_DOWN, ", 1))
    sub(repo, CODE, EXPORT, EXPORT.replace("rounding=ROUND_HALF_UP", "rounding=ROUND_DOWN"))


def usd_by_default(repo: Path) -> None:
    sub(repo, CODE, EXPORT, EXPORT.replace('currency="EUR"', 'currency="USD"'))


def unknown_categories_exempt(repo: Path) -> None:
    """An unknown VAT category is charged nothing (was: the standard rate); only the Q4 test,
    whose data has an intra-eu invoice, sees it."""
    sub(repo, CODE, RATE, RATE.replace('rates["standard"]', 'Decimal("0")'))


def new_wording(repo: Path) -> None:
    sub(repo, CODE, WORDING, WORDING.replace('"; row skipped"', '" (row skipped)"'))


def _extract(repo: Path) -> None:
    sub(repo, CODE, RATE + "        value = gross(amount, rate, rounding)\n",
        "        value = gross(amount, _rate_of(row, rates), rounding)\n")
    sub(repo, CODE, "\n\ndef export(", '\n\ndef _rate_of(row, rates):\n    return rates.get(row.get("category") or "standard", rates["standard"])\n\n\ndef export(')


def _extract_module(repo: Path) -> None:
    write(repo, "invoice_money.py", '"""Money arithmetic of the export."""\nfrom decimal import Decimal\n\nCENT = Decimal("0.01")\n\n\ndef to_cents(value, rounding):\n    return value.quantize(CENT, rounding=rounding)\n')
    sub(repo, CODE, "from pathlib import Path\n", "from pathlib import Path\n\nfrom invoice_money import to_cents\n")
    sub(repo, CODE, '    return (amount * (1 + rate)).quantize(Decimal("0.01"), rounding=rounding)\n',
        "    return to_cents(amount * (1 + rate), rounding)\n")


def _rename_local(repo: Path) -> None:
    sub(repo, CODE, "    for number, row in enumerate(rows, start=2):", "    for line_no, row in enumerate(rows, start=2):")
    sub(repo, CODE, "% (number, row.get", "% (line_no, row.get")


def _comments(repo: Path) -> None:
    sub(repo, CODE, "    with open(path, encoding=\"utf-8\") as f:\n", "    # rates.json: {\"vat\": {category: rate}}\n    with open(path, encoding=\"utf-8\") as f:\n")
    sub(repo, CODE, "    return (amount * (1 + rate))", "    # quantize last: round once, on the gross amount\n    return (amount * (1 + rate))")
    sub(repo, CODE, "    rows = list(csv.DictReader(sys.stdin))\n", "    # the whole input at once: the accounting export is small\n    rows = list(csv.DictReader(sys.stdin))\n")


def _type_hints(repo: Path) -> None:
    sub(repo, CODE, "def gross(amount, rate, rounding=ROUND_HALF_UP):", "def gross(amount: Decimal, rate: Decimal, rounding: str = ROUND_HALF_UP) -> Decimal:")


def _docstring(repo: Path) -> None:
    sub(repo, CODE, "def load_rates(path):\n", 'def load_rates(path):\n    """VAT rates by category, as Decimals, from a rates.json file."""\n')


NEW_TEST = '''from decimal import ROUND_HALF_UP, Decimal

import export_invoices


def test_gross_of_zero_is_zero(rates):
    assert export_invoices.gross(Decimal("0"), rates["standard"], ROUND_HALF_UP) == Decimal("0.00")


def test_reduced_rate_rounds_half_up(rates):
    assert export_invoices.gross(Decimal("0.10"), rates["reduced"]) == Decimal("0.11")
'''


def _new_test(repo: Path) -> None:
    write(repo, "tests/test_gross.py", NEW_TEST)


def _test_rename(repo: Path) -> None:
    sub(repo, TESTS, "def test_half_even_rounding_keeps_the_cent(", "def test_half_even_rounding_keeps_the_last_cent(")


def _private_rename(repo: Path) -> None:
    sub(repo, "bin/report", "def _parse_amount(text):", "def _to_decimal(text):")
    sub(repo, "bin/report", '+ _parse_amount(row["gross"])', '+ _to_decimal(row["gross"])')


def _move_test(repo: Path) -> None:
    text = (repo / TESTS).read_text(encoding="utf-8")
    start = text.index("def test_bad_amount_is_skipped_with_its_line_number")
    end = text.index("\ndef ", start + 1)
    (repo / TESTS).write_text(text[:start] + text[end + 1 :], encoding="utf-8")
    write(repo, "tests/test_skipped_rows.py", "import export_invoices\n\n\n" + text[start:end].rstrip() + "\n")


def _extract_with_test(repo: Path) -> None:
    _extract(repo)
    write(repo, "tests/test_rate_of.py", 'import export_invoices\n\n\ndef test_unknown_category_pays_the_standard_rate(rates):\n    assert export_invoices._rate_of({"category": "nope"}, rates) == rates["standard"]\n')


def _readme(repo: Path) -> None:
    sub(repo, "README.md", "invoice", "invoice (see pins.jsonl for what it must keep doing)")


def _reorder_imports(repo: Path) -> None:
    sub(repo, CODE, "import csv\nimport json\nimport os\nimport sys\n", "import csv\nimport os\nimport sys\nimport json\n")


def _rounding_in_main(repo: Path) -> None:
    sub(repo, CODE, IMPORTS, IMPORTS.replace("import ", "import ROUND_DOWN, ", 1))
    sub(repo, CODE, '    rounding = ROUNDING[os.environ.get("INVOICE_ROUNDING", "half-up")]\n',
        "    rounding = ROUND_DOWN\n")


def _report_drops_last_row(repo: Path) -> None:
    sub(repo, "bin/report", "    for row in rows:\n", "    for row in rows[:-1]:  # the last row is the trailer\n")


def _new_env_read(repo: Path) -> None:
    sub(repo, CODE, '    currency = os.environ.get("INVOICE_CURRENCY", "EUR")\n',
        '    currency = os.environ.get("INVOICE_CURRENCY", os.environ.get("INVOICE_DEFAULT", "EUR"))\n')


def _e(
    name: str,
    expect: str,
    kind: str,
    what: str,
    edit: Edit,
    gate: str = "",
    reason: str = "",
    also: tuple[tuple[str, str], ...] = (),
) -> Entry:
    return Entry(name, DEMO, expect, kind, what, edit=edit, gate=gate, reason=reason, also=also)


HONEST = [
    _e("demo-extract-helper", "ACCEPT", "honest", "extract _rate_of() from export()", _extract),
    _e("demo-extract-into-new-module", "ACCEPT", "honest", "gross() rounds through a new invoice_money.to_cents()", _extract_module),
    _e("demo-rename-local", "ACCEPT", "honest", "export(): number -> line_no", _rename_local),
    _e("demo-comments", "ACCEPT", "honest", "comments in three functions", _comments),
    _e("demo-type-hints", "ACCEPT", "honest", "type hints on gross()", _type_hints),
    _e("demo-docstring", "ACCEPT", "honest", "a docstring on load_rates()", _docstring),
    _e("demo-new-passing-test", "ACCEPT", "honest", "tests/test_gross.py, two passing tests", _new_test),
    _e("demo-test-rename", "ACCEPT", "honest", "a test renamed", _test_rename),
    _e("demo-private-rename", "ACCEPT", "honest", "bin/report: _parse_amount -> _to_decimal with its only caller", _private_rename),
    _e("demo-move-test", "ACCEPT", "honest", "a test moved to its own file", _move_test),
    _e("demo-extract-with-its-test", "ACCEPT", "honest", "extract _rate_of() and test it", _extract_with_test),
    _e("demo-readme", "ACCEPT", "honest", "README wording", _readme),
    _e("demo-reorder-imports", "ACCEPT", "honest", "imports reordered", _reorder_imports),
]
BEHAVIOUR = [
    _e("demo-stderr-wording", "REJECT", "behaviour", "the skipped-row warning reworded", new_wording, "Behaviour", "skipped-row"),
    _e("demo-round-down-in-main", "REJECT", "behaviour", "main() truncates", _rounding_in_main, "Behaviour", "eur-quarter"),
    _e("demo-truncate-by-default", "REJECT", "behaviour", "export() truncates by default", truncate_by_default, "Tests", QUARTER),
    _e("demo-usd-by-default", "REJECT", "behaviour", "export() defaults to USD", usd_by_default, "Tests", "test_export_defaults_to_euro"),
    _e("demo-unknown-category-exempt", "REJECT", "behaviour", "unknown VAT categories pay 0", unknown_categories_exempt, "Tests", "test_q4_intra_eu_invoices_pay_the_standard_rate"),
    _e("demo-report-drops-last-row", "REJECT", "behaviour", "bin/report skips the last row", _report_drops_last_row, "Behaviour", "report-totals"),
    _e("demo-new-env-read", "REJECT", "behaviour", "main() reads INVOICE_DEFAULT", _new_env_read, "Entry points", "INVOICE_DEFAULT"),
]

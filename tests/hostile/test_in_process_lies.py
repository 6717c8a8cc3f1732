"""Class B of #17: code in the test process can lie about the test process. A patch whose
production code makes failing tests read passed (a pytest hook planted through `gc`, a report
class rewritten through `sys.modules`) while its behaviour change sits where no changed function
is (a data file, module-level code) must still be REJECT: the verdict rests on the base's tests'
entry calls into the production code, replayed out of process on both versions.

Both attacks run the real `charpin-remote verify` on the clean box. The first is the attacker's
(b03); the second is another lie of the same class, which nothing was written against."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main

from tests.conftest import git, make_repo
from tests.hostile.harness import require_bwrap

pytestmark = pytest.mark.slow

RATES = '{"DE": 19, "FR": 20}\n'
VAT = (
    "import json\nimport pathlib\n\n"
    'RATES = json.loads(pathlib.Path(__file__).with_name("rates.json").read_text())\n\n\n'
    "def gross_for(country, net):\n    return round(net * (100 + RATES[country])) / 100\n"
)
TEST = (
    "from shop.vat import gross_for\n\n\n"
    'def test_de():\n    assert gross_for("DE", 100.0) == 119.0\n'
)

# The attacker's: a hook found through gc clears every failure; the rate moves in the data file.
GC_HOOK = """

def _settle():
    import gc

    class Calm:
        def pytest_runtest_makereport(self, item, call):
            if call.excinfo is not None and call.when == "call":
                call.excinfo = None

    for obj in gc.get_objects():
        if type(obj).__name__ == "Config" and "pluginmanager" in vars(obj):
            if not obj.pluginmanager.has_plugin("calm"):
                obj.pluginmanager.register(Calm(), "calm")


_settle()
"""

# Same class, another channel: the report class rewritten through sys.modules (its name built so
# a text search for it finds nothing), and the behaviour change in module-level code of another
# module (shop/__init__.py rebinds RATES), no function changed at all.
REPORT_REWRITE = """
import sys as _s

_m = _s.modules.get("_py" + "test.reports")
if _m is not None:
    _orig = _m.TestReport.from_item_and_call.__func__

    def _calm(cls, item, call):
        report = _orig(cls, item, call)
        report.outcome = "passed"
        report.longrepr = None
        return report

    _m.TestReport.from_item_and_call = classmethod(_calm)

from shop import vat as _vat

_vat.RATES = dict(_vat.RATES, DE=21)
"""


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    require_bwrap()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    files = {
        "shop/__init__.py": "",
        "shop/rates.json": RATES,
        "shop/vat.py": VAT,
        "tests/__init__.py": "",
        "tests/test_vat.py": TEST,
        "pyproject.toml": '[tool.charpin]\npytest_args = ["-q"]\n',
    }
    return make_repo(tmp_path / "shop", files)


def _verify(repo: Path, changes: dict[str, str], run_id: str) -> dict[str, Any]:
    for path, text in changes.items():
        (repo / path).write_text(text)
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "--binary"], capture_output=True, check=True
    ).stdout
    git(repo, "checkout", "-q", "--", ".")
    patch = repo.parent / f"{run_id}.diff"
    patch.write_bytes(diff)
    out = repo.parent / "verify"
    argv = ["verify", "--repo", str(repo), "--patch", str(patch), "--out", str(out)]
    main([*argv, "--run-id", run_id, "--json", "--hosts", "clean", "--timeout", "120"])
    report: dict[str, Any] = json.loads((out / run_id / "verify.json").read_text())
    return report


def _caught(report: dict[str, Any]) -> None:
    assert report["verdict"] == "REJECT", report["gates"]
    [finding] = [o for o in report["observations"] if o["gate"] == "Behaviour"]
    assert finding["item"] == "shop/vat.py::gross_for#1"
    assert "returned 119.0 on base, 121.0 on patched" in finding["what"]
    assert "tests/test_vat.py::test_de" in finding["what"]


def test_a_gc_planted_hook_and_a_data_file_change_is_rejected(shop: Path) -> None:
    changes = {"shop/rates.json": '{"DE": 21, "FR": 20}\n', "shop/vat.py": VAT + GC_HOOK}
    report = _verify(shop, changes, "gc-hook")
    _caught(report)
    # The lie itself worked in the test process: the base's test read passed there.
    tests = [g for g in report["gates"] if g["gate"] == "Tests"]
    assert [g["status"] for g in tests] == ["PASS"], tests


def test_a_rewritten_report_class_and_a_module_level_rebind_is_rejected(shop: Path) -> None:
    report = _verify(shop, {"shop/__init__.py": REPORT_REWRITE}, "rewrite")
    _caught(report)

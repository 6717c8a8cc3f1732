"""Pin targets that are not a `*.py` file (#10 items 10 and 11), on realistic project shapes.

Projects run their code as `python -m pkg`, as a console script declared in packaging metadata,
or through `bin/tool` with a `#!/usr/bin/env python` line and no `.py`. Each used to record a
crash (`No module named 'pkg'`) as its golden, which then replayed green after any edit to
`pkg`. Every test here drives the real `charpin` command in a real git repository, with a decoy
`python` first on PATH (as on a laptop where PATH's python is not the project's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, make_repo

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")

# A lint tool shaped like pyflakes: a package, a bin/ script without .py, setup.py metadata.
LINTER = {
    "setup.py": (
        "try:\n"
        "    from setuptools import setup\n"
        "except ImportError:\n"
        "    from distutils.core import setup\n"
        "    extra = {'scripts': ['bin/lintkit']}\n"
        "else:\n"
        "    extra = {'entry_points': {'console_scripts': ['lintkit = lintkit.api:main']}}\n"
        "setup(name='lintkit', packages=['lintkit', 'lintkit.scripts'], **extra)\n"
    ),
    "lintkit/__init__.py": "__version__ = '1.0'\n",
    "lintkit/messages.py": (
        "class UnusedImport:\n"
        "    message = '%r imported but unused'\n"
        "\n"
        "    def __init__(self, filename, lineno, col, name):\n"
        "        self.where = f'{filename}:{lineno}:{col + 1}'\n"
        "        self.name = name\n"
        "\n"
        "    def __str__(self):\n"
        "        return f'{self.where}: ' + self.message % (self.name,)\n"
    ),
    "lintkit/api.py": (
        "import ast\n"
        "import sys\n"
        "\n"
        "from lintkit import messages\n"
        "\n"
        "\n"
        "def check(source, filename):\n"
        "    tree = ast.parse(source, filename)\n"
        "    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}\n"
        "    found = []\n"
        "    for node in ast.walk(tree):\n"
        "        if isinstance(node, ast.Import):\n"
        "            for alias in node.names:\n"
        "                name = alias.asname or alias.name\n"
        "                if name not in used:\n"
        "                    found.append(messages.UnusedImport(\n"
        "                        filename, node.lineno, node.col_offset, name))\n"
        "    return found\n"
        "\n"
        "\n"
        "def main():\n"
        "    found = check(sys.stdin.read(), '<stdin>')\n"
        "    for message in found:\n"
        "        print(message)\n"
        "    sys.exit(1 if found else 0)\n"
    ),
    "lintkit/scripts/__init__.py": "",
    "lintkit/scripts/lintkit.py": "from lintkit.api import main\n",
    "bin/lintkit": "#!/usr/bin/env python\nfrom lintkit.scripts.lintkit import main\nmain()\n",
    ".gitignore": ".charpin/\n",
}

# An invoice exporter in a src layout: `python -m invoicer` and the `invoicer` console script.
INVOICER = {
    "pyproject.toml": (
        "[project]\n"
        'name = "invoicer"\n'
        'version = "2.1"\n'
        "\n"
        "[project.scripts]\n"
        'invoicer = "invoicer.cli:main"\n'
        "\n"
        "[tool.pytest.ini_options]\n"
        'pythonpath = ["src"]\n'
    ),
    "src/invoicer/__init__.py": "",
    "src/invoicer/__main__.py": "from invoicer.cli import main\n\nraise SystemExit(main())\n",
    "src/invoicer/money.py": (
        "from decimal import ROUND_HALF_EVEN, Decimal\n"
        "\n"
        "SYMBOLS = {'USD': '$', 'EUR': 'EUR ', 'GBP': 'GBP '}\n"
        "\n"
        "\n"
        "def fmt(amount, currency):\n"
        "    cents = Decimal(amount).quantize(Decimal('0.01'), rounding=ROUND_HALF_EVEN)\n"
        "    return f'{SYMBOLS[currency]}{cents}'\n"
    ),
    "src/invoicer/cli.py": (
        "import argparse\n"
        "import csv\n"
        "import sys\n"
        "\n"
        "from invoicer.money import fmt\n"
        "\n"
        "\n"
        "def main(argv=None):\n"
        "    parser = argparse.ArgumentParser(description='Total invoices from CSV on stdin.')\n"
        "    parser.add_argument('--currency', default='USD')\n"
        "    args = parser.parse_args(argv)\n"
        "    total = 0\n"
        "    for customer, price, qty in csv.reader(sys.stdin):\n"
        "        net = float(price) * int(qty)\n"
        "        total += net\n"
        "        print(f'{customer:<8} {fmt(net, args.currency)}')\n"
        "    print(f'TOTAL {fmt(total, args.currency)}')\n"
        "    return 0\n"
    ),
    "tools/where.py": (
        "import invoicer\n\nif __name__ == '__main__':\n    print(invoicer.__file__)\n"
    ),
    ".gitignore": ".charpin/\n",
}
INVOICES = "acme,10.005,3\nglobex,0.125,1\n"


@pytest.fixture
def decoy(tmp_path: Path) -> Path:
    """A folder holding `python` and `python3` that are not the project's Python."""
    folder = tmp_path / "decoy-bin"
    folder.mkdir()
    for name in ("python", "python3"):
        script = folder / name
        script.write_text(
            "#!/bin/sh\necho 'decoy python: not the project interpreter' >&2\nexit 97\n"
        )
        script.chmod(0o755)
    return folder


def _charpin(repo: Path, decoy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `charpin` command, run from the repository as a user would."""
    env = {**os.environ, "PYTHONPATH": RUNNER}
    env["PATH"] = f"{decoy}{os.pathsep}{env.get('PATH', os.defpath)}"
    return subprocess.run(
        [sys.executable, "-m", "charpin_runner", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _inventory(repo: Path, decoy: Path) -> dict[str, str]:
    """`charpin inventory`'s table: entry -> PINNED."""
    done = _charpin(repo, decoy, "inventory")
    assert done.returncode == 0, done.stdout + done.stderr
    table = done.stdout.split("\n\n", 1)[0].splitlines()[1:]
    return {cols[0]: cols[-1] for cols in (re.split(r"\s{2,}", row) for row in table)}


def _stdin_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _pins(repo: Path) -> dict[str, dict[str, object]]:
    lines = (repo / "pins.jsonl").read_text().splitlines()
    return {p["id"]: p for p in map(json.loads, lines)}


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must occur once in {path}"
    path.write_text(text.replace(old, new))


def test_a_bin_script_without_py_pins_the_program_and_goes_red_after_an_edit(
    tmp_path: Path, decoy: Path
) -> None:
    repo = make_repo(tmp_path / "lintkit", LINTER)
    (repo / "bin" / "lintkit").chmod(0o755)
    unused = _stdin_file(tmp_path, "unused.py", "import os\nimport sys\nprint(sys.argv)\n")
    clean = _stdin_file(tmp_path, "clean.py", "x = 1\n")
    for pin_id, source, target in (
        ("unused", unused, "bin/lintkit"),
        ("clean", clean, "bin/lintkit"),
        ("console", unused, "lintkit"),  # setup.py's console script, which nobody installed
    ):
        done = _charpin(
            repo, decoy, "pins", "record", "--id", pin_id, "--stdin", source, "--", target
        )
        assert done.returncode == 0, done.stdout + done.stderr
    pins = _pins(repo)
    assert pins["console"]["stdout"] == pins["unused"]["stdout"]
    # The program ran, with the repository's package, under the pins' Python (not the decoy).
    assert pins["unused"]["stdout"] == "<stdin>:1:1: 'os' imported but unused\n"
    assert (pins["unused"]["exit_code"], pins["unused"]["stderr"]) == (1, "")
    assert (pins["clean"]["exit_code"], pins["clean"]["stdout"]) == (0, "")
    done = _charpin(repo, decoy, "pins", "check", "--prove")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pins: 3 passed, 0 drifted, of 3" in done.stdout

    _edit(repo / "lintkit" / "messages.py", "imported but unused", "imported and unused")
    done = _charpin(repo, decoy, "pins", "check")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "DRIFT unused [stdout]" in done.stdout
    assert "+<stdin>:1:1: 'os' imported and unused" in done.stdout
    assert "DRIFT console [stdout]" in done.stdout
    assert "pins: 1 passed, 2 drifted, of 3" in done.stdout


def test_module_and_console_script_targets_in_a_src_layout(tmp_path: Path, decoy: Path) -> None:
    repo = make_repo(tmp_path / "invoicer", INVOICER)
    assert shutil.which("invoicer") is None  # nothing is installed: the pins need no install
    invoices = _stdin_file(tmp_path, "invoices.csv", INVOICES)
    record = ("pins", "record", "--stdin", invoices, "--id")
    for argv in (
        ("m-usd", "--", "-m", "invoicer", "--currency", "USD"),
        ("python-m-eur", "--", "python", "-m", "invoicer", "--currency", "EUR"),
    ):
        done = _charpin(repo, decoy, *record, *argv)
        assert done.returncode == 0, done.stdout + done.stderr
    # The inventory counts a pin of `python -m invoicer` as pinning that entry point; the
    # console script of the same name is another entry point, not pinned yet.
    rows = _inventory(repo, decoy)
    assert (rows["python -m invoicer"], rows["invoicer"], rows["tools/where.py"]) == (
        "yes",
        "no",
        "no",
    )
    done = _charpin(repo, decoy, *record, "script-gbp", "--", "invoicer", "--currency", "GBP")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _inventory(repo, decoy)["invoicer"] == "yes"
    # A case folder names the module in target.txt the same way; argv.json is the whole
    # process vector, the program's own name first.
    case = repo / "cases" / "m-help"
    case.mkdir(parents=True)
    (case / "target.txt").write_text("-m invoicer\n")
    (case / "argv.json").write_text('["invoicer", "--help"]\n')
    done = _charpin(repo, decoy, "pins", "record")
    assert done.returncode == 0, done.stdout + done.stderr

    pins = _pins(repo)
    assert pins["m-usd"]["argv"] == ["-m", "invoicer", "--currency", "USD"]
    assert pins["m-usd"]["stdout"] == "acme     $30.02\nglobex   $0.12\nTOTAL $30.14\n"
    assert pins["python-m-eur"]["stdout"] == (
        "acme     EUR 30.02\nglobex   EUR 0.12\nTOTAL EUR 30.14\n"
    )
    assert pins["script-gbp"]["argv"] == ["invoicer", "--currency", "GBP"]
    assert pins["script-gbp"]["stdout"].endswith("TOTAL GBP 30.14\n")
    golden = json.loads((repo / "goldens" / "m-help.json").read_text())
    # argparse's prog is the name argv.json gives the program (sys.argv[0]).
    assert golden["stdout"].startswith("usage: invoicer [-h] [--currency CURRENCY]")

    done = _charpin(repo, decoy, "pins", "check", "--prove")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pins: 4 passed, 0 drifted, of 4" in done.stdout

    _edit(repo / "src" / "invoicer" / "money.py", "Decimal('0.01')", "Decimal('0.1')")
    done = _charpin(repo, decoy, "pins", "check")
    assert done.returncode == 2, done.stdout + done.stderr
    for pin_id in ("m-usd", "python-m-eur", "script-gbp"):
        assert f"DRIFT {pin_id} [stdout]" in done.stdout
    assert "pins: 1 passed, 3 drifted, of 4" in done.stdout


def test_pins_import_the_checkout_they_replay_in_not_the_one_that_recorded_them(
    tmp_path: Path, decoy: Path
) -> None:
    repo = make_repo(tmp_path / "invoicer", INVOICER)
    done = _charpin(repo, decoy, "pins", "record", "--id", "where", "--", "tools/where.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pins(repo)["where"]["stdout"] == "$REPO/src/invoicer/__init__.py\n"
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pins")
    clone = tmp_path / "elsewhere" / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    shutil.rmtree(repo)  # the recording checkout is gone: nothing may point into it
    done = _charpin(clone, decoy, "pins", "check")
    assert done.returncode == 0, done.stdout + done.stderr


LEGACY = {
    "lib/legacy/__init__.py": "",
    "lib/legacy/sync.py": (
        "import sys\n\n\ndef main():\n    print('synced', len(sys.argv) - 1, 'accounts')\n"
    ),
    "bin/sync": "#!/usr/bin/env python3\nfrom legacy.sync import main\nmain()\n",
    ".gitignore": ".charpin/\n",
}


def test_recording_an_import_crash_of_the_repositorys_code_is_refused_with_the_fix(
    tmp_path: Path, decoy: Path
) -> None:
    repo = make_repo(tmp_path / "legacy", LEGACY)
    (repo / "bin" / "sync").chmod(0o755)
    done = _charpin(repo, decoy, "pins", "record", "--id", "sync", "--", "bin/sync", "a", "b")
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "refused: pin sync records a crash, not the program: "
        "\"ModuleNotFoundError: No module named 'legacy'\"; legacy is in the repository under "
        "lib, which is not on the pins' pythonpath ['.']: set [tool.charpin.pins] pythonpath = "
        '[".", "lib"], then record again'
    ) in done.stderr
    assert not (repo / "pins.jsonl").exists()

    (repo / "pyproject.toml").write_text('[tool.charpin.pins]\npythonpath = [".", "lib"]\n')
    done = _charpin(repo, decoy, "pins", "record", "--id", "sync", "--", "bin/sync", "a", "b")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pins(repo)["sync"]["stdout"] == "synced 2 accounts\n"


def test_a_crash_golden_from_before_is_a_warning_in_check_and_a_failure_of_prove(
    tmp_path: Path, decoy: Path
) -> None:
    """Goldens recorded before the fix are crashes; --prove must not call them proven."""
    repo = make_repo(tmp_path / "legacy", LEGACY)
    (repo / "bin" / "sync").chmod(0o755)
    (repo / "pins.jsonl").write_text(json.dumps({"id": "sync", "argv": ["bin/sync", "a"]}) + "\n")
    # What replay observes now is what an older charpin recorded: take it as the golden.
    done = _charpin(repo, decoy, "pins", "check")
    actual = repo / ".charpin" / "pins-actual" / "sync"
    golden = {
        "id": "sync",
        "argv": ["bin/sync", "a"],
        "exit_code": int((actual / "exit_code").read_text()),
        "stdout": (actual / "stdout").read_text(),
        "stderr": (actual / "stderr").read_text(),
        "env_read": json.loads((actual / "result.json").read_text())["env_read"],
        "norm_counts": json.loads((actual / "result.json").read_text())["norm_counts"],
    }
    assert "No module named 'legacy'" in golden["stderr"]
    (repo / "pins.jsonl").write_text(json.dumps(golden) + "\n")

    done = _charpin(repo, decoy, "pins", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning: pin sync records a crash, not the program" in done.stderr
    assert "`charpin pins record --update sync`" in done.stderr
    done = _charpin(repo, decoy, "pins", "check", "--prove")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "prove: pin sync records a crash, not the program" in done.stdout
    assert 'pythonpath = [".", "lib"]' in done.stdout
    assert "prove: FAILED, 1 golden(s) record an import crash, not the program" in done.stdout


def test_a_missing_dependency_is_refused_unless_the_pin_expects_that_crash(
    tmp_path: Path, decoy: Path
) -> None:
    files = dict(INVOICER)
    files["src/invoicer/pdf.py"] = "import reportlab_not_installed\n"
    repo = make_repo(tmp_path / "invoicer", files)
    record = ("pins", "record", "--id", "pdf")
    done = _charpin(repo, decoy, *record, "--", "-m", "invoicer.pdf")
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        'refused: pin pdf records a crash, not the program: "ModuleNotFoundError: No module '
        "named 'reportlab_not_installed'\"; reportlab_not_installed is not in the repository"
    ) in done.stderr
    assert "record it with --expect-crash" in done.stderr
    assert not (repo / "pins.jsonl").exists()
    # Pinning "without the PDF extra this fails" is a choice the pin states.
    done = _charpin(repo, decoy, *record, "--expect-crash", "--", "-m", "invoicer.pdf")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pins(repo)["pdf"]["expect_crash"] is True
    done = _charpin(repo, decoy, "pins", "check", "--prove")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "records a crash" not in done.stdout + done.stderr


def test_a_pythonpath_outside_the_repository_is_a_configuration_error(
    tmp_path: Path, decoy: Path
) -> None:
    files = dict(LEGACY)
    files["pyproject.toml"] = '[tool.charpin.pins]\npythonpath = ["../shared-libs"]\n'
    repo = make_repo(tmp_path / "legacy", files)
    done = _charpin(repo, decoy, "pins", "record", "--id", "sync", "--", "bin/sync")
    assert done.returncode == 64
    assert "pythonpath folder '../shared-libs' must be a relative path inside the repository" in (
        done.stderr
    )
    assert "at `$.tool.charpin.pins`" in done.stderr


def test_cover_replays_module_console_script_and_shebang_pins(tmp_path: Path, decoy: Path) -> None:
    pytest.importorskip("coverage")
    repo = make_repo(tmp_path / "lintkit", LINTER)
    (repo / "bin" / "lintkit").chmod(0o755)
    unused = _stdin_file(tmp_path, "unused.py", "import os\n")
    for pin_id, target in (("bin", "bin/lintkit"), ("console", "lintkit")):
        done = _charpin(
            repo, decoy, "pins", "record", "--id", pin_id, "--stdin", unused, "--", target
        )
        assert done.returncode == 0, done.stdout + done.stderr
    done = _charpin(repo, decoy, "pins", "cover")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {
        line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("lintkit")
    }
    assert rows["lintkit/api.py"].endswith("bin, console"), done.stdout
    assert rows["lintkit/scripts/lintkit.py"].endswith("bin"), done.stdout

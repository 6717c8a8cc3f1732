"""Hostile test suites, run for real by `charpin receipt`, fail the right gate in `compare`.

Each case runs the same commit twice: once tame (the baseline), once with HOSTILE=1 set, which
makes one test misbehave. The receipts come from the real runner and the real probe.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from charpin_coordinator.drift import build_report
from charpin_coordinator.receipts import read_receipt_file

from tests.conftest import make_repo
from tests.waiting import make_gate, waiting

ROOT = Path(__file__).parents[2]

PREAMBLE = (
    "import os, pathlib, subprocess, sys\n"
    "HERE = pathlib.Path(__file__).parent\n"
    "FIXTURE = HERE / 'fixtures' / 'rates.json'\n"
    "HOSTILE = os.environ.get('HOSTILE') == '1'\n"
    "def test_reads_rates():\n"
    "    assert FIXTURE.read_text()\n"
)

CASES = {
    "mutates-fixture": (
        'def test_hostile():\n    if HOSTILE:\n        FIXTURE.write_text(\'{"vat": "0.99"}\')\n',
        "Fixture integrity",
        "moved during the run: tests/fixtures/rates.json",
    ),
    "symlink-swap": (
        "def test_hostile():\n"
        "    if HOSTILE:\n"
        "        FIXTURE.unlink()\n"
        "        FIXTURE.symlink_to('/etc/hostname')\n",
        "Fixture integrity",
        "symlinks out of the root: tests/fixtures/rates.json",
    ),
    # Writes once during the run (and says so), then would write again once released from the
    # gate (tests/waiting.py): after the run nothing may still wait there.
    "background-writer": (
        "def test_hostile():\n"
        "    if HOSTILE:\n"
        "        code = ('import os, select, sys\\n'\n"
        "                'gate = os.open(sys.argv[2], os.O_RDONLY | os.O_NONBLOCK)\\n'\n"
        '                \'open(sys.argv[1], "a").write("x")\\n\'\n'
        "                'print(\"wrote\", flush=True)\\n'\n"
        "                'select.select([gate], [], [])\\n'\n"
        '                \'open(sys.argv[1], "a").write("x")\\n\')\n'
        "        gate = str(HERE.parent.parent / 'gate')\n"
        "        writer = subprocess.Popen([sys.executable, '-c', code, str(FIXTURE), gate],\n"
        "                                  stdout=subprocess.PIPE)\n"
        "        assert writer.stdout.readline() == b'wrote\\n'\n",
        "Fixture integrity",
        "moved during the run: tests/fixtures/rates.json",
    ),
    "rewrites-head": (
        "def test_hostile():\n"
        "    if HOSTILE:\n"
        "        head = HERE.parent / '.git' / 'HEAD'\n"
        "        head.write_text('ref: refs/heads/elsewhere\\n')\n"
        "        subprocess.run(['git', '-C', str(HERE.parent), 'branch', 'elsewhere', 'HEAD~1'], check=True)\n",
        "Identity",
        "HEAD moved during the run",
    ),
    "os-exit": (
        "def test_hostile():\n    if HOSTILE:\n        os._exit(0)\ndef test_after():\n    pass\n",
        "Completeness",
        "the test session never finished",
    ),
}


def _env(hostile: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HOSTILE"}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / p) for p in ("runner", "coordinator"))
    if hostile:
        env["HOSTILE"] = "1"
    return env


def _receipt(repo: Path, out: Path, label: str, hostile: bool) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "charpin_runner",
            "receipt",
            "--repo",
            str(repo),
            "--label",
            label,
            "-o",
            str(out),
            "-q",
            # Without bubblewrap, whose view (read-only .git, nothing outside the repository)
            # would stop two of these before they misbehave: the gates are what is tested here.
            "--sandbox",
            "off",
        ],
        env=_env(hostile),
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert out.is_file(), f"no receipt for {label}"
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_suite_fails_the_right_gate(case, tmp_path):
    body, gate, needle = CASES[case]
    make_gate(tmp_path / "gate")
    repo = make_repo(
        tmp_path / "repo",
        {
            "tests/__init__.py": "",
            "tests/fixtures/rates.json": '{"vat": "0.20"}\n',
            "tests/test_hostile.py": PREAMBLE + body,
            # The tests' environment is an allow-list (rule 6): HOSTILE is named to reach them.
            "pyproject.toml": '[tool.charpin]\nenv_allow = ["HOSTILE"]\n',
        },
    )
    (repo / "tests" / "extra.txt").write_text("second commit\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "second"], check=True)
    base = read_receipt_file(_receipt(repo, tmp_path / "base.json", "tame", hostile=False))
    bad = read_receipt_file(_receipt(repo, tmp_path / "bad.json", "hostile", hostile=True))
    report = build_report([("tame", base), ("hostile", bad)])
    verdicts = {(g.gate, g.box): g for g in report.gates}
    assert verdicts[(gate, "tame")].status == "PASS"
    failing = verdicts[(gate, "hostile")]
    assert failing.status == "FAIL", failing
    assert needle in failing.detail
    assert report.exit_code & 2
    if case == "background-writer":
        # The whole process group was killed before the after-hash: nothing waits to write.
        fixture = repo / "tests" / "fixtures" / "rates.json"
        size = fixture.stat().st_size
        assert not waiting(tmp_path / "gate"), "the background writer outlived the run"
        assert fixture.stat().st_size == size

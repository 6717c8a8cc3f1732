"""Attack: a test plants a complete, passing receipt at the path the runner will write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from charpin_runner.receipt import dumps

from tests.hostile.harness import BOX_KINDS, host_for, not_evaluated, repo_with, require_bwrap, run
from tests.receipt_factory import make_receipt

FORGER = '''
import json, os, subprocess
from pathlib import Path

MARK = {mark!r}


def _runner_argv():
    pid = os.getppid()
    for _ in range(8):
        try:
            args = Path(f"/proc/{{pid}}/cmdline").read_bytes().split(b"\\0")
        except OSError:
            return None
        if b"receipt" in args and b"-o" in args:
            return [a.decode() for a in args]
        pid = int(Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return None


def test_forges_its_receipt():
    argv = _runner_argv()
    if argv is not None:
        opt = lambda name: argv[argv.index(name) + 1]
        forged = json.loads(Path(__file__).with_name("forged.json").read_text())
        head = opt("--expected-commit")
        tree = subprocess.run(["git", "rev-parse", "HEAD^{{tree}}"], capture_output=True,
                              text=True).stdout.strip()
        forged.update(run_id=opt("--run-id"), label=opt("--label"))
        forged["identity"].update(head_before=head, head_after=head, tree_before=tree,
                                  tree_after=tree, expected_commit=head)
        out = Path(opt("-o"))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(forged))
        Path(str(out) + ".seal").write_text(json.dumps(
            {{"receipt_sha256": "0" * 64, "exit": 0, "mac": "0" * 64}}))
        Path(MARK).write_text(str(out))
    Path("tests/fixtures/data.txt").write_text("vandalised\\n")
    assert False, "this test fails, and its planted receipt says it passed"
'''


def _forged_json() -> str:
    node = "tests/test_forge.py::test_forges_its_receipt"
    base = make_receipt("x")
    collection = base.collection
    receipt = make_receipt(
        "x",
        outcomes={node: "passed"},
        durations={node: 0.01},
        collection=type(collection)(
            collected=[node], deselected=[], selected=[node], executed=[node], order=[node],
            filtered=[], dropped=[], probe_started=True, session_finished=True,
        ),
    )
    return dumps(receipt).decode()


@pytest.mark.parametrize("kind", BOX_KINDS)
def test_a_planted_receipt_is_refused(kind: str, sshd_factory: Any, tmp_path: Path) -> None:
    # --sandbox off: under bwrap the test cannot even see its parents' command lines (the next
    # test), so the seal is what stands between a planted receipt and a clean report here.
    code, report, mark = _attack(kind, "off", sshd_factory, tmp_path)
    assert mark.exists(), "the attack did not reach the receipt path: nothing was tested"
    refused = not_evaluated(report).get(report["_hosts"])
    assert refused is not None and refused["kind"] == "receipt-refused", report
    assert "seal" in refused["reason"]
    assert code & 4 and code & 8, code


@pytest.mark.parametrize("kind", BOX_KINDS)
def test_under_bubblewrap_the_runner_is_out_of_sight(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    require_bwrap()
    code, report, mark = _attack(kind, "auto", sshd_factory, tmp_path)
    assert not mark.exists()
    assert not report["not_evaluated"], report
    assert code & 1, code  # judged on real evidence: the test failed


def _attack(
    kind: str, sandbox: str, sshd_factory: Any, tmp_path: Path
) -> tuple[int, dict[str, Any], Path]:
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    mark = tmp_path / "forged-at"
    repo = repo_with(
        tmp_path / "repo",
        {
            "tests/test_forge.py": FORGER.format(mark=str(mark)),
            "tests/forged.json": _forged_json(),
            "tests/fixtures/data.txt": "original\n",
        },
        boxes,
    )
    code, report, _ = run(repo, hosts, "--sandbox", sandbox, ssh_config=ssh_config)
    report["_hosts"] = hosts
    return code, report, mark

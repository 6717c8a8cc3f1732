"""Attacks on the parent's git measurement: a test rewrites `.git/` so that charpin's own git
would run its code or stop seeing what it changed. Each runs through the real `charpin receipt`
in a real repository; the attacking test passes, so only the measurement can catch it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import git, make_repo
from tests.runner.test_receipt_cmd import charpin, charpin_env, only_receipt
from tests.waiting import SHELL_AWAIT_GATE, make_gate, waiting

APP = "src/app.py"
NODE = "tests/test_attack.py::test_attack"
HEADER = "import os, pathlib, shutil, subprocess\n\n\ndef git(*args):\n"
HEADER += "    subprocess.run(['git', *args], check=True, capture_output=True)\n\n\n"


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def attack(tmp_path: Path, body: str, run: Runner = charpin) -> tuple[int, dict[str, Any], Path]:
    """Commit a repository whose one test runs body, take a receipt; (exit, receipt, repo)."""
    repo = make_repo(
        tmp_path / "repo",
        {
            APP: "print('hello')\n",
            "tests/__init__.py": "",
            "tests/test_attack.py": HEADER + "def test_attack():\n" + body,
        },
    )
    # Without bubblewrap: these attack the parent's measurement, which must hold on a box that
    # has none (under bwrap the checkout's .git is read-only: test_rule2_sandbox_view.py).
    result = run(repo, "--no-pins", "--sandbox", "off")
    receipt = only_receipt(repo)
    # The attack itself went through: the test passed, so a plain receipt would say ok.
    assert receipt["outcomes"] == {NODE: "passed"}, result.stderr
    return result.returncode, receipt, repo


def trap(folder: Path, name: str) -> tuple[Path, Path]:
    """A script that leaves `name-ran` behind and starts a daemon that writes `name-daemon`
    once released from the gate `name-gate` (and passes its input through, as a filter would);
    (script, ran marker). No daemon waits at the gate once charpin returned: it never ran, or
    it was killed with the run (tests/waiting.py)."""
    ran, daemon = folder / f"{name}-ran", folder / f"{name}-daemon"
    gate = make_gate(folder / f"{name}-gate")
    wait = SHELL_AWAIT_GATE.format(gate=gate)
    script = folder / f"{name}.sh"
    script.write_text(
        f"#!/bin/sh\ntouch '{ran}'\n({wait}; touch '{daemon}') </dev/null >/dev/null 2>&1 &\ncat\n"
    )
    script.chmod(0o755)
    return script, ran


def no_attacker_code_ran(folder: Path, name: str) -> None:
    assert not (folder / f"{name}-ran").exists()
    assert not waiting(folder / f"{name}-gate"), "the trap's daemon outlived the run"
    assert not (folder / f"{name}-daemon").exists()


def incomplete_because(receipt: dict[str, Any], *words: str) -> None:
    exit_block = receipt["exit"]
    assert exit_block["interpretation"] == "incomplete", exit_block
    for word in words:
        assert any(word in reason for reason in exit_block["reasons"]), (word, exit_block)


def test_an_included_filter_with_attributes_never_runs_in_the_parent(tmp_path: Path) -> None:
    script, _ = trap(tmp_path, "filter")
    code, receipt, repo = attack(
        tmp_path,
        f"    pathlib.Path('.git/evil.cfg').write_text('[filter \"hide\"]\\n\\tclean = {script}\\n"
        f'\\trequired = true\\n[diff "hide"]\\n\\ttextconv = {script}\\n\')\n'
        "    git('config', 'include.path', 'evil.cfg')\n"
        "    os.makedirs('.git/info', exist_ok=True)\n"
        "    pathlib.Path('.git/info/attributes').write_text('* filter=hide diff=hide\\n')\n"
        f"    pathlib.Path({APP!r}).write_text(\"print('HELLO')\\n\")\n",
    )
    no_attacker_code_ran(tmp_path, "filter")
    assert code == 2
    assert receipt["tree"]["written"] == [APP]
    incomplete_because(receipt, "include.path", "filter.hide.clean", ".git/info/attributes")
    # The trap was real: the user's own git runs the filter on the next status.
    git(repo, "status", "--porcelain")
    assert (tmp_path / "filter-ran").exists()


def test_skip_worktree_does_not_hide_an_edit(tmp_path: Path) -> None:
    code, receipt, repo = attack(
        tmp_path,
        f"    pathlib.Path({APP!r}).write_text('print(1)\\n')\n"
        f"    git('update-index', '--skip-worktree', {APP!r})\n",
    )
    assert git(repo, "status", "--porcelain") == ""
    assert code == 2
    tree = receipt["tree"]
    assert (tree["dirty_after"], tree["written"]) == ([APP], [APP])
    assert (tree["flagged_before"], tree["flagged_after"]) == ([], [APP])
    incomplete_because(receipt, "skip-worktree or assume-unchanged on src/app.py")


def test_assume_unchanged_does_not_hide_an_edit(tmp_path: Path) -> None:
    code, receipt, repo = attack(
        tmp_path,
        f"    pathlib.Path({APP!r}).write_text('print(2)\\n')\n"
        f"    git('update-index', '--assume-unchanged', {APP!r})\n",
    )
    assert git(repo, "status", "--porcelain") == ""
    assert code == 2
    assert receipt["tree"]["written"] == [APP]
    assert receipt["tree"]["flagged_after"] == [APP]


def test_an_info_exclude_entry_added_during_the_run_hides_nothing(tmp_path: Path) -> None:
    code, receipt, repo = attack(
        tmp_path,
        "    pathlib.Path('src/dropped.py').write_text('x = 1\\n')\n"
        "    os.makedirs('.git/info', exist_ok=True)\n"
        "    with open('.git/info/exclude', 'a') as f:\n"
        "        f.write('\\nsrc/dropped.py\\n')\n",
    )
    assert "dropped" not in git(repo, "status", "--porcelain", "-uall")
    assert code == 2
    assert receipt["tree"]["written"] == ["src/dropped.py"]
    incomplete_because(receipt, "the run changed .git/info/exclude")


def test_a_new_gitignore_with_a_star_hides_nothing(tmp_path: Path) -> None:
    code, receipt, repo = attack(
        tmp_path,
        "    pathlib.Path('.gitignore').write_text('*\\n')\n"
        "    pathlib.Path('src/dropped.py').write_text('x = 1\\n')\n",
    )
    assert git(repo, "status", "--porcelain", "-uall") == ""
    assert receipt["tree"]["written"] == [".gitignore", "src/dropped.py"]
    # Nothing in .git changed: the Clean tree gate fails on `written`, the run itself is ok.
    assert (code, receipt["exit"]["interpretation"]) == (0, "ok")


def test_core_worktree_pointing_at_a_pristine_copy_is_neutralised_and_named(
    tmp_path: Path,
) -> None:
    pristine = tmp_path / "pristine"
    code, receipt, repo = attack(
        tmp_path,
        f"    shutil.copytree('src', {str(pristine / 'src')!r})\n"
        f"    shutil.copytree('tests', {str(pristine / 'tests')!r})\n"
        f"    pathlib.Path({APP!r}).write_text('print(3)\\n')\n"
        f"    git('config', 'core.worktree', {str(pristine)!r})\n",
    )
    assert git(repo, "status", "--porcelain") == ""  # the user's git now looks elsewhere
    assert code == 2
    assert receipt["tree"]["written"] == [APP]
    incomplete_because(receipt, "the run changed the repository's git config: core.worktree")
    # Left in place, it does not redirect the next receipt either, and is named again.
    shutil.rmtree(repo / ".charpin")
    again = charpin(repo, "--no-pins")
    later = only_receipt(repo)
    # The edit it hid is still seen (dirty before this run, and the test of it fails); the
    # setting is named as a note, since it was there before this run and is measured around.
    assert again.returncode == 1, again.stderr
    assert later["tree"]["dirty_before"] == [APP]
    assert any(
        r.startswith("note: the repository's git config sets core.worktree")
        for r in later["exit"]["reasons"]
    )


def test_an_fsmonitor_hook_never_runs_and_hides_nothing(tmp_path: Path) -> None:
    script, _ = trap(tmp_path, "fsmonitor")
    code, receipt, _repo = attack(
        tmp_path,
        f"    git('config', 'core.fsmonitor', {str(script)!r})\n"
        f"    pathlib.Path({APP!r}).write_text('print(4)\\n')\n",
    )
    no_attacker_code_ran(tmp_path, "fsmonitor")
    assert code == 2
    assert receipt["tree"]["written"] == [APP]
    incomplete_because(receipt, "core.fsmonitor")


def test_hooks_planted_through_core_hooks_path_never_run(tmp_path: Path) -> None:
    script, _ = trap(tmp_path, "hook")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("post-index-change", "reference-transaction", "post-checkout"):
        (hooks / name).symlink_to(script)
    code, receipt, _repo = attack(
        tmp_path,
        f"    git('config', 'core.hooksPath', {str(hooks)!r})\n"
        f"    os.symlink({str(script)!r}, '.git/hooks/post-index-change')\n"
        f"    pathlib.Path({APP!r}).write_text('print(5)\\n')\n",
    )
    no_attacker_code_ran(tmp_path, "hook")
    assert code == 2
    assert receipt["tree"]["written"] == [APP]
    incomplete_because(receipt, "core.hookspath", ".git/hooks/post-index-change")


def charpin_budget_2s(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`charpin receipt ARGS` with each git measurement given 2 seconds instead of minutes."""
    code = (
        "import sys; from charpin_runner import gitstate; gitstate.MEASURE_SECONDS = 2.0; "
        "from charpin_runner.cli import main; raise SystemExit(main(['receipt', *sys.argv[1:]]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=repo,
        env=charpin_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_fifo_planted_in_git_stops_the_measurement_not_the_receipt(tmp_path: Path) -> None:
    code, receipt, _repo = attack(
        tmp_path,
        "    os.mkfifo('.git/packed-refs')\n"
        "    os.makedirs('.git/objects/info', exist_ok=True)\n"
        "    os.mkfifo('.git/objects/info/alternates')\n",
        run=charpin_budget_2s,
    )
    assert code == 2
    assert receipt["identity"]["head_after"] == "unresolved"
    incomplete_because(receipt, "did not finish within 2 s")


def test_a_partial_clone_lazy_fetch_never_runs_in_the_parent(tmp_path: Path) -> None:
    script, _ = trap(tmp_path, "fetch")
    upstream = tmp_path / "up.git"
    code, receipt, _repo = attack(
        tmp_path,
        f"    git('clone', '-q', '--bare', '.', {str(upstream)!r})\n"
        "    git('config', 'core.repositoryformatversion', '1')\n"
        "    git('config', 'extensions.partialClone', 'origin')\n"
        f"    git('config', 'remote.origin.url', {str(upstream)!r})\n"
        "    git('config', 'remote.origin.promisor', 'true')\n"
        f"    git('config', 'remote.origin.uploadpack', {str(script)!r})\n"
        "    head = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True)\n"
        "    os.remove(os.path.join('.git', 'objects', head.stdout[:2], head.stdout[2:].strip()))\n",
    )
    no_attacker_code_ran(tmp_path, "fetch")
    assert code == 2
    incomplete_because(receipt, "git cannot resolve HEAD")

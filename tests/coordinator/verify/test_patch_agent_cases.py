"""Agent-style patches through verify/patch.py (the lead's cases): made into a commit as git applies it, never touching the user's
working tree, index, HEAD or refs; a patch that does not apply is one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from charpin_coordinator.verify import patch
from charpin_runner.errors import UsageError

from tests.conftest import git, make_repo


def state(repo: Path) -> tuple[str, str, str, str]:
    """What the user has: HEAD, refs, the index and the working tree's status."""
    return (
        git(repo, "rev-parse", "HEAD"),
        git(repo, "for-each-ref"),
        git(repo, "ls-files", "-s"),
        git(repo, "status", "--porcelain"),
    )


def diff_of(repo: Path, edit: dict[str, bytes | None], *, binary: bool = True) -> bytes:
    """git diff of edits made and undone in repo (None deletes a file)."""
    for rel, data in edit.items():
        path = repo / rel
        if data is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    git(repo, "add", "-A")
    argv = ["git", "-C", str(repo), "diff", "--cached", *(["--binary"] if binary else [])]
    out = subprocess.run(argv, capture_output=True, check=True).stdout
    git(repo, "reset", "-q", "--hard")
    return out


def show(repo: Path, commit: str, rel: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{rel}"], capture_output=True, check=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo",
        {"a.py": "x = 1\n", "dir with space/b.txt": "b\n", "gone.txt": "bye\n", "run.sh": "echo\n"},
    )


def test_a_plain_diff_becomes_a_commit_on_the_base_and_nothing_of_the_user_moves(
    repo: Path,
) -> None:
    before = state(repo)
    made = patch.from_patch(repo, diff_of(repo, {"a.py": b"x = 2\n"}), None)
    assert state(repo) == before
    assert git(repo, "rev-parse", f"{made.patched}^") == made.base == before[0]
    assert show(repo, made.patched, "a.py") == b"x = 2\n"
    assert made.changed == ("a.py",) and len(made.patch_sha256) == 64


def test_binary_renames_modes_deletions_and_spaces_apply_as_git_applies_them(repo: Path) -> None:
    blob = bytes(range(256)) * 8
    git(repo, "mv", "dir with space/b.txt", "dir with space/c d.txt")
    (repo / "run.sh").chmod(0o755)
    git(repo, "rm", "-q", "gone.txt")
    (repo / "img.bin").write_bytes(blob)
    git(repo, "add", "-A")
    data = subprocess.run(
        ["git", "-C", str(repo), "diff", "--cached", "--binary", "-M"],
        capture_output=True,
        check=True,
    ).stdout
    git(repo, "reset", "-q", "--hard")
    before = state(repo)
    made = patch.from_patch(repo, data, None)
    assert state(repo) == before
    assert show(repo, made.patched, "img.bin") == blob
    assert show(repo, made.patched, "dir with space/c d.txt") == b"b\n"
    mode = git(repo, "ls-tree", made.patched, "run.sh").split()[0]
    assert mode == "100755"
    assert made.changed == (
        "dir with space/b.txt",
        "dir with space/c d.txt",
        "gone.txt",
        "img.bin",
        "run.sh",
    )


def test_a_format_patch_series_applies_in_order_with_its_base_commit(
    repo: Path, tmp_path: Path
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "agent")
    for value in ("2", "3"):
        (repo / "a.py").write_text(f"x = {value}\n")
        git(repo, "commit", "-qam", f"x = {value}")
    series = subprocess.run(
        ["git", "-C", str(repo), "format-patch", "--stdout", f"--base={base}", f"{base}..agent"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    git(repo, "checkout", "-q", "main")
    (repo / "a.py").write_text("x = 9\n")
    git(repo, "commit", "-qam", "main moved on")  # HEAD is no longer the patch's base
    made = patch.from_patch(repo, series, None)
    assert made.base == base  # from the base-commit: line, not HEAD
    assert show(repo, made.patched, "a.py") == b"x = 3\n"


def test_a_patch_that_does_not_apply_names_the_hunk_in_one_line(repo: Path) -> None:
    data = diff_of(repo, {"a.py": b"x = 2\n"})
    (repo / "a.py").write_text("y = 0\n")
    git(repo, "commit", "-qam", "moved on")
    with pytest.raises(UsageError) as caught:
        patch.from_patch(repo, data, None)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("the patch does not apply to ")
    assert "a.py: patch failed at line 1 (hunk 1)" in message


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"", "empty"), (b"hello, not a diff\n", "no diff in it")],
)
def test_empty_input_and_text_that_is_no_patch_are_usage_errors(
    repo: Path, data: bytes, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        patch.from_patch(repo, data, None)


def test_a_bad_base_is_named(repo: Path) -> None:
    with pytest.raises(UsageError, match="--base nope is not a commit"):
        patch.from_patch(repo, diff_of(repo, {"a.py": b"x = 2\n"}), "nope")


def test_patched_rev_is_diffed_against_the_base(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "agent")
    (repo / "a.py").write_text("x = 5\n")
    git(repo, "commit", "-qam", "agent")
    git(repo, "checkout", "-q", "main")
    made = patch.from_rev(repo, "agent", None)
    assert made.base == base and made.patched == git(repo, "rev-parse", "agent")
    assert b"+x = 5" in made.patch and made.changed == ("a.py",)


def test_restore_from_base_puts_protected_paths_back(repo: Path) -> None:
    (repo / "pins.jsonl").write_text("golden\n")
    (repo / "cases" / "one").mkdir(parents=True)
    (repo / "cases" / "one" / "cmd").write_text("run\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pins")
    edits: dict[str, bytes | None] = {
        "a.py": b"x = 2\n",
        "pins.jsonl": b"rewritten\n",
        "cases/one/cmd": None,
        "cases/two/cmd": b"new case\n",
    }
    made = patch.from_patch(repo, diff_of(repo, edits), None)
    before = state(repo)
    runs = patch.restore_from_base(repo, made, ["pins.jsonl", "cases", "goldens"])
    assert state(repo) == before
    assert show(repo, runs, "a.py") == b"x = 2\n"  # the code change stays
    assert show(repo, runs, "pins.jsonl") == b"golden\n"
    assert show(repo, runs, "cases/one/cmd") == b"run\n"
    listed = git(repo, "ls-tree", "-r", "--name-only", runs, "cases")
    assert listed.split() == ["cases/one/cmd"]
    assert patch.restore_from_base(repo, made, ["goldens"]) == made.patched  # untouched: as is

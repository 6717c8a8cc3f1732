"""verify/patch.py on real repositories: a patch made a commit exactly as git applies it, the user's
working tree, index, HEAD and refs never moved, and every refusal one line naming the fix."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from charpin_coordinator.verify import patch
from charpin_runner.errors import UsageError

from tests.conftest import git, make_repo

APP = "".join(f"line {n}\n" for n in range(1, 31))


def run(repo: Path, *args: str) -> bytes:
    """git's stdout as bytes, unstripped (a patch's last newline matters)."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def edit(repo: Path, files: dict[str, bytes | None]) -> None:
    for rel, data in files.items():
        path = repo / rel
        if data is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def diff_of(repo: Path, files: dict[str, bytes | None], *, binary: bool = False) -> bytes:
    """The diff of files edited in repo, which is put back as it was afterwards."""
    edit(repo, files)
    git(repo, "add", "-A")
    data = run(repo, "diff", "--cached", *(["--binary"] if binary else []))
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-qfd")
    return data


def show(repo: Path, commit: str, rel: str) -> bytes:
    return run(repo, "show", f"{commit}:{rel}")


def mode(repo: Path, commit: str, rel: str) -> str:
    return run(repo, "ls-tree", commit, "--", rel).decode().split()[0]


def exists(repo: Path, commit: str, rel: str) -> bool:
    return bool(run(repo, "ls-tree", "-r", commit, "--", rel))


def state(repo: Path) -> tuple[str, ...]:
    """All the user can see: HEAD, refs, index, status (untracked files too), worktree bytes."""
    files = sorted(
        (str(p.relative_to(repo)), p.read_bytes())
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    )
    return (
        git(repo, "rev-parse", "HEAD"),
        git(repo, "for-each-ref"),
        git(repo, "ls-files", "-s"),
        git(repo, "status", "--porcelain", "--untracked-files=all"),
        repr(files),
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo",
        {
            "src/app.py": APP,
            "src/util.py": "def util():\n    return 1\n",
            "tests/test_app.py": "def test_app():\n    assert True\n",
            "README.md": "hello\n",
        },
    )


def test_a_plain_diff_becomes_an_unreferenced_commit_on_the_base(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    data = diff_of(repo, {"src/app.py": APP.replace("line 3\n", "line three\n").encode()})
    made = patch.from_patch(repo, data, None)
    assert made.base == base
    assert git(repo, "rev-parse", f"{made.patched}^") == base
    assert (
        show(repo, made.patched, "src/app.py") == APP.replace("line 3\n", "line three\n").encode()
    )
    assert made.patch == data
    assert re.fullmatch(r"[0-9a-f]{64}", made.patch_sha256)
    assert made.changed == ("src/app.py",)
    message = git(repo, "log", "-1", "--format=%an <%ae>|%cn|%s", made.patched)
    assert (
        message
        == f"charpin verify <verify@charpin.invalid>|charpin verify|charpin verify: patch {made.patch_sha256[:12]}"
    )
    assert made.patched not in git(repo, "for-each-ref", "--format=%(objectname)")
    # The same patch on the same base is the same commit.
    assert patch.from_patch(repo, data, base).patched == made.patched


def test_a_binary_diff_applies_byte_for_byte(repo: Path) -> None:
    blob = bytes(range(256)) * 40
    edit(repo, {"assets/logo.bin": b"\x00\x01old"})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "binary")
    data = diff_of(repo, {"assets/logo.bin": blob, "assets/new.bin": blob[::-1]}, binary=True)
    assert b"GIT binary patch" in data
    made = patch.from_patch(repo, data, None)
    assert show(repo, made.patched, "assets/logo.bin") == blob
    assert show(repo, made.patched, "assets/new.bin") == blob[::-1]
    assert made.changed == ("assets/logo.bin", "assets/new.bin")


def test_a_rename_with_a_mode_change_lists_both_sides(repo: Path) -> None:
    git(repo, "mv", "src/util.py", "src/helpers.py")
    (repo / "src/helpers.py").chmod(0o755)
    git(repo, "add", "-A")
    data = run(repo, "diff", "--cached", "-M")
    git(repo, "reset", "-q", "--hard")
    assert b"rename from src/util.py" in data and b"new mode 100755" in data
    made = patch.from_patch(repo, data, None)
    assert not exists(repo, made.patched, "src/util.py")
    assert mode(repo, made.patched, "src/helpers.py") == "100755"
    assert show(repo, made.patched, "src/helpers.py") == b"def util():\n    return 1\n"
    assert made.changed == ("src/helpers.py", "src/util.py")


def test_a_mode_change_alone_is_a_change(repo: Path) -> None:
    (repo / "src/util.py").chmod(0o755)
    data = run(repo, "diff")
    git(repo, "reset", "-q", "--hard")
    made = patch.from_patch(repo, data, None)
    assert mode(repo, made.patched, "src/util.py") == "100755"
    assert made.changed == ("src/util.py",)


def test_a_deletion_removes_the_file(repo: Path) -> None:
    made = patch.from_patch(repo, diff_of(repo, {"tests/test_app.py": None}), None)
    assert not exists(repo, made.patched, "tests/test_app.py")
    assert made.changed == ("tests/test_app.py",)


def test_names_with_spaces_and_hostile_bytes_apply_and_stay_one_path(repo: Path) -> None:
    spaced, hostile = "docs/read me now.txt", os.fsdecode(b'odd/"new\nline" \xff.txt')
    data = diff_of(repo, {spaced: b"spaced\n", hostile: b"hostile\n"})
    made = patch.from_patch(repo, data, None)
    assert show(repo, made.patched, spaced) == b"spaced\n"
    listing = run(repo, "ls-tree", "-r", "-z", "--name-only", made.patched).split(b"\0")
    assert os.fsencode(hostile) in listing
    # Decoded with surrogateescape: the exact name, back to git's argv byte for byte.
    assert made.changed == tuple(sorted([spaced, hostile]))
    restored = patch.restore_from_base(repo, made, ["odd"])
    assert not exists(repo, restored, "odd")
    assert show(repo, restored, spaced) == b"spaced\n"


def test_a_format_patch_series_applies_in_order_changing_one_file_twice(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    once = APP.replace("line 3\n", "line three\n")
    twice = once.replace("line 20\n", "line twenty\n").replace("line three\n", "line 3!\n")
    edit(repo, {"src/app.py": once.encode()})
    git(repo, "commit", "-qam", "first")
    edit(repo, {"src/app.py": twice.encode(), "NEW.md": b"new\n"})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "second\n\nA body with a line that reads\n--- like a header")
    series = run(repo, "format-patch", "--stdout", f"{base}..HEAD")
    assert series.count(b"\nFrom ") + series.startswith(b"From ") == 2
    git(repo, "reset", "-q", "--hard", base)
    made = patch.from_patch(repo, series, None)
    assert made.base == base
    assert show(repo, made.patched, "src/app.py") == twice.encode()
    assert made.changed == ("NEW.md", "src/app.py")
    assert git(repo, "rev-parse", f"{made.patched}^") == base  # one commit, not a replayed series


def test_the_base_commit_trailer_is_used_only_when_it_is_head(repo: Path) -> None:
    """#18 item 5: the base is the reviewer's. A trailer naming HEAD is fine; one naming an
    older commit (which may lack the test that catches the patch) is refused unless --base
    names it."""
    base = git(repo, "rev-parse", "HEAD")
    edit(repo, {"src/app.py": APP.replace("line 5\n", "line five\n").encode()})
    git(repo, "commit", "-qam", "agent")
    series = run(repo, "format-patch", "--stdout", f"--base={base}", "-1")
    assert f"base-commit: {base}".encode() in series
    git(repo, "reset", "-q", "--hard", base)
    assert patch.from_patch(repo, series, None).base == base  # the trailer is HEAD
    edit(repo, {"src/app.py": APP.replace("line 1\n", "line 1 upstream\n").encode()})
    git(repo, "commit", "-qam", "main moved on")
    with pytest.raises(UsageError, match=rf"base-commit {base[:12]}, which is not HEAD"):
        patch.from_patch(repo, series, None)
    # The reviewer can choose that older base, on purpose.
    assert patch.from_patch(repo, series, base).base == base
    # A trailer naming a commit this repository lacks is refused the same way.
    foreign = series.replace(base.encode(), b"1" * 40)
    with pytest.raises(UsageError, match="which is not HEAD"):
        patch.from_patch(repo, foreign, None)


def test_a_failing_hunk_is_named_in_one_line(repo: Path) -> None:
    new = APP.replace("line 2\n", "line two\n").replace("line 25\n", "line twenty-five\n")
    data = diff_of(repo, {"src/app.py": new.encode()})
    assert data.count(b"\n@@ ") == 2
    edit(repo, {"src/app.py": APP.replace("line 24\n", "line 24 moved\n").encode()})
    git(repo, "commit", "-qam", "upstream")
    head = git(repo, "rev-parse", "HEAD")
    before = state(repo)
    with pytest.raises(UsageError) as caught:
        patch.from_patch(repo, data, None)
    assert str(caught.value) == (
        f"the patch does not apply to {head[:12]}: src/app.py: patch failed at line 22 (hunk 2); "
        "rebase it onto --base or pass the right --base"
    )
    assert state(repo) == before


def test_a_deleted_line_that_reads_like_a_header_does_not_confuse_the_hunk_count(
    repo: Path,
) -> None:
    # `-- sig` deleted is `--- sig` in the patch: counted as a hunk line, not a file header.
    text = "-- sig\n" + APP
    edit(repo, {"src/app.py": text.encode()})
    git(repo, "commit", "-qam", "signature")
    data = diff_of(repo, {"src/app.py": APP.replace("line 25\n", "line 25!\n").encode()})
    edit(repo, {"src/app.py": text.replace("line 26\n", "line 26 moved\n").encode()})
    git(repo, "commit", "-qam", "upstream")
    with pytest.raises(UsageError, match=r"src/app.py: patch failed at line 23 \(hunk 2\); "):
        patch.from_patch(repo, data, None)


def test_a_series_names_the_commit_that_fails(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    edit(repo, {"README.md": b"hello there\n"})
    git(repo, "commit", "-qam", "one")
    edit(repo, {"src/util.py": b"def util():\n    return 2\n"})
    git(repo, "commit", "-qam", "two")
    series = run(repo, "format-patch", "--stdout", f"{base}..HEAD")
    git(repo, "reset", "-q", "--hard", base)
    edit(repo, {"src/util.py": b"def util():\n    return 7\n"})
    git(repo, "commit", "-qam", "upstream")
    with pytest.raises(
        UsageError, match=r": commit 2 of 2: src/util.py: patch failed at line 1 \(hunk 1\); "
    ):
        patch.from_patch(repo, series, None)


def test_a_missing_file_is_named(repo: Path) -> None:
    data = diff_of(repo, {"README.md": b"bye\n"})
    git(repo, "rm", "-q", "README.md")
    git(repo, "commit", "-qm", "gone")
    with pytest.raises(
        UsageError,
        match=r"^the patch does not apply to [0-9a-f]{12}: README.md: does not exist in index; rebase",
    ):
        patch.from_patch(repo, data, None)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", r"^the patch is empty; pass the output of git diff or git format-patch$"),
        (b" \n\n", r"^the patch is empty; "),
        (b"hello\nthis is prose\n", r"^the patch has no diff in it; pass the output of git diff"),
        (
            b"diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n",
            r"^the patch cannot be read: corrupt patch at line \d+; pass git diff or git format-patch",
        ),
    ],
)
def test_empty_input_and_not_a_patch_are_usage_errors(
    repo: Path, data: bytes, message: str
) -> None:
    before = state(repo)
    with pytest.raises(UsageError, match=message) as caught:
        patch.from_patch(repo, data, None)
    assert "\n" not in str(caught.value)
    assert state(repo) == before


def test_a_patch_that_changes_nothing_is_refused(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    edit(repo, {"README.md": b"changed\n"})
    git(repo, "commit", "-qam", "there")
    edit(repo, {"README.md": b"hello\n"})
    git(repo, "commit", "-qam", "and back")
    series = run(repo, "format-patch", "--stdout", f"{base}..HEAD")
    with pytest.raises(UsageError, match="the patch changes nothing in"):
        patch.from_patch(repo, series, base)


@pytest.mark.parametrize("rev", ["nope", "-p", "HEAD~9"])
def test_a_bad_base_is_named(repo: Path, rev: str) -> None:
    data = diff_of(repo, {"README.md": b"bye\n"})
    with pytest.raises(UsageError, match=f"^--base {re.escape(rev)} is not a commit in "):
        patch.from_patch(repo, data, rev)
    with pytest.raises(UsageError, match=f"^--base {re.escape(rev)} is not a commit in "):
        patch.from_rev(repo, "HEAD", rev)


def test_outside_a_repository_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not a git repository"):
        patch.from_patch(tmp_path, b"diff", None)


def test_the_users_state_is_untouched_even_when_dirty(repo: Path) -> None:
    good = diff_of(repo, {"src/app.py": APP.replace("line 9\n", "line nine\n").encode()})
    # The user is mid-work: a staged change, an unstaged change and an untracked file.
    edit(repo, {"README.md": b"staged\n"})
    git(repo, "add", "README.md")
    edit(repo, {"src/app.py": b"unstaged\n", "scratch.txt": b"mine\n"})
    git(repo, "branch", "feature")
    before = state(repo)
    made = patch.from_patch(repo, good, None)
    assert state(repo) == before
    patch.restore_from_base(repo, made, ["src"])
    assert state(repo) == before
    with pytest.raises(UsageError):
        patch.from_patch(repo, good.replace(b"line 8", b"line 8 not there"), None)
    assert state(repo) == before
    assert show(repo, made.patched, "README.md") == b"hello\n"  # from base, not the user's index


def test_a_subfolder_or_the_users_config_does_not_change_what_applies(repo: Path) -> None:
    data = diff_of(repo, {"README.md": b"trailing space   \n", "tests/new.py": b"x = 1\n"})
    git(repo, "config", "apply.whitespace", "error")
    git(repo, "config", "commit.gpgSign", "true")
    made = patch.from_patch(repo / "src", data, None)
    assert show(repo, made.patched, "README.md") == b"trailing space   \n"
    assert show(repo, made.patched, "tests/new.py") == b"x = 1\n"


def test_from_rev_diffs_the_given_commit_against_the_base(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-qb", "agent")
    edit(repo, {"src/app.py": APP.replace("line 1\n", "").encode(), "bin.dat": bytes(range(256))})
    git(repo, "rm", "-q", "tests/test_app.py")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "agent work")
    agent = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    git(repo, "config", "diff.noprefix", "true")  # the user's taste must not break the evidence
    git(repo, "config", "color.diff", "always")
    made = patch.from_rev(repo, "agent", None)
    assert (made.base, made.patched) == (base, agent)
    assert made.changed == ("bin.dat", "src/app.py", "tests/test_app.py")
    # The evidence is a patch that makes the same tree from base.
    again = patch.from_patch(repo, made.patch, base)
    assert git(repo, "rev-parse", f"{again.patched}^{{tree}}") == git(
        repo, "rev-parse", f"{agent}^{{tree}}"
    )
    with pytest.raises(
        UsageError, match=r"^--patched nope is not a commit in .*; fetch the agent's branch"
    ):
        patch.from_rev(repo, "nope", None)
    with pytest.raises(UsageError, match="does not differ from the base"):
        patch.from_rev(repo, "main", None)


def test_restore_from_base_puts_a_modified_file_back(repo: Path) -> None:
    data = diff_of(
        repo,
        {
            "tests/test_app.py": b"def test_app():\n    pass\n",
            "src/app.py": b"rewritten\n",
        },
    )
    made = patch.from_patch(repo, data, None)
    restored = patch.restore_from_base(repo, made, ["tests/test_app.py"])
    assert restored != made.patched
    assert git(repo, "rev-parse", f"{restored}^") == made.base
    assert show(repo, restored, "tests/test_app.py") == b"def test_app():\n    assert True\n"
    assert show(repo, restored, "src/app.py") == b"rewritten\n"  # the rest of the patch stays


def test_restore_from_base_removes_what_the_patch_added_under_a_folder(repo: Path) -> None:
    data = diff_of(
        repo,
        {
            "tests/conftest.py": b"import os\n",
            "tests/deep/more.py": b"x = 1\n",
            "testsuite/keep.py": b"kept\n",  # shares a prefix with tests, not the folder
        },
    )
    made = patch.from_patch(repo, data, None)
    restored = patch.restore_from_base(repo, made, ["tests/"])
    assert not exists(repo, restored, "tests/conftest.py")
    assert not exists(repo, restored, "tests/deep")
    assert show(repo, restored, "tests/test_app.py") == b"def test_app():\n    assert True\n"
    assert show(repo, restored, "testsuite/keep.py") == b"kept\n"


def test_restore_from_base_brings_back_a_deleted_file_and_its_mode(repo: Path) -> None:
    (repo / "src/util.py").chmod(0o755)
    git(repo, "commit", "-qam", "executable")
    made = patch.from_patch(repo, diff_of(repo, {"src/util.py": None, "README.md": b"bye\n"}), None)
    restored = patch.restore_from_base(repo, made, ["src/util.py", "not/touched"])
    assert show(repo, restored, "src/util.py") == b"def util():\n    return 1\n"
    assert mode(repo, restored, "src/util.py") == "100755"
    assert show(repo, restored, "README.md") == b"bye\n"


def test_restore_from_base_undoes_a_file_turned_into_a_folder(repo: Path) -> None:
    edit(repo, {"README.md": None, "README.md/inner.txt": b"now a folder\n"})
    git(repo, "add", "-A")
    data = run(repo, "diff", "--cached")
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-qfd")
    made = patch.from_patch(repo, data, None)
    restored = patch.restore_from_base(repo, made, ["README.md"])
    assert git(repo, "rev-parse", f"{restored}^{{tree}}") == git(repo, "rev-parse", "HEAD^{tree}")


def test_restore_from_base_with_nothing_touched_returns_the_patched_commit(repo: Path) -> None:
    made = patch.from_patch(repo, diff_of(repo, {"README.md": b"bye\n"}), None)
    assert patch.restore_from_base(repo, made, ["tests", "src/app.py"]) == made.patched
    assert patch.restore_from_base(repo, made, []) == made.patched


def test_a_base_commit_outside_the_reviewers_history_is_refused(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "elsewhere")
    (repo / "src" / "app.py").write_text("VALUE = 'a base the reviewer never had'\n")
    git(repo, "commit", "-qam", "elsewhere")
    side = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "agent")
    (repo / "src" / "app.py").write_text("VALUE = 'agent'\n")
    git(repo, "commit", "-qam", "agent")
    series = run(repo, "format-patch", "--stdout", f"--base={side}", f"{side}..agent")
    git(repo, "checkout", "-q", base)
    # The base decides the configuration: an untrusted patch may not pick one the reviewer
    # never had.
    with pytest.raises(UsageError, match=r"which is not HEAD .*; .*pass --base"):
        patch.from_patch(repo, series, None)
    assert patch.from_patch(repo, series, side).base == side  # confirmed by the reviewer

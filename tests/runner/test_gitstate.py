"""gitstate on real repositories: HEAD, tree, dirty paths, digests and written paths."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from charpin_runner import gitstate
from charpin_runner.errors import RunError, UsageError

from tests.conftest import git, make_repo

EMPTY = hashlib.sha256(b"").hexdigest()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "r", {"a.txt": "a\n", "b.txt": "b\n", "dir/c.txt": "c\n"})


def test_clean_repo_reads_head_tree_and_nothing_dirty(repo: Path) -> None:
    state = gitstate.read_state(repo)
    assert state.head == git(repo, "rev-parse", "HEAD")
    assert state.tree == git(repo, "rev-parse", "HEAD^{tree}")
    assert state.dirty == []
    assert state.digest == EMPTY
    assert state.contents == {}


def test_modified_file_is_dirty_and_digest_follows_content(repo: Path) -> None:
    (repo / "a.txt").write_text("changed\n")
    first = gitstate.read_state(repo)
    assert first.dirty == ["a.txt"]
    assert first.digest != EMPTY
    (repo / "a.txt").write_text("changed again\n")
    second = gitstate.read_state(repo)
    assert second.dirty == ["a.txt"]
    assert second.digest != first.digest


def test_untracked_files_in_new_folders_are_listed_one_by_one(repo: Path) -> None:
    (repo / "new" / "deep").mkdir(parents=True)
    (repo / "new" / "deep" / "x.bin").write_bytes(b"\x00\x01")
    (repo / "new" / "y.txt").write_text("y")
    state = gitstate.read_state(repo)
    assert state.dirty == ["new/deep/x.bin", "new/y.txt"]
    assert state.contents["new/y.txt"] == "?:" + hashlib.sha256(b"y").hexdigest()


def test_untracked_content_changes_the_digest(repo: Path) -> None:
    (repo / "u.txt").write_text("one")
    first = gitstate.read_state(repo).digest
    (repo / "u.txt").write_text("two")
    assert gitstate.read_state(repo).digest != first


def test_staged_new_file_is_dirty(repo: Path) -> None:
    (repo / "staged.txt").write_text("s\n")
    git(repo, "add", "staged.txt")
    state = gitstate.read_state(repo)
    assert state.dirty == ["staged.txt"]
    assert state.contents["staged.txt"].startswith("A.:")


def test_rename_lists_both_paths(repo: Path) -> None:
    git(repo, "mv", "b.txt", "renamed.txt")
    state = gitstate.read_state(repo)
    assert state.dirty == ["b.txt", "renamed.txt"]
    assert state.contents["b.txt"].endswith(":absent")


@pytest.mark.parametrize("name", ["with space.txt", "new\nline.txt", 'quo"te.txt', "tab\there"])
def test_awkward_names_survive_untracked_and_modified(tmp_path: Path, name: str) -> None:
    repo = make_repo(tmp_path / "r", {name: "v1\n", "other.txt": "o\n"})
    (repo / name).write_text("v2\n")
    (repo / ("untracked " + name)).write_text("u\n")
    state = gitstate.read_state(repo)
    assert state.dirty == sorted([name, "untracked " + name])


def test_own_output_folder_is_ignored(repo: Path) -> None:
    (repo / ".charpin" / "receipts").mkdir(parents=True)
    (repo / ".charpin" / "receipts" / "r.json").write_text("{}")
    state = gitstate.read_state(repo)
    assert state.dirty == []
    assert state.digest == EMPTY


def test_written_lists_only_paths_that_changed_during_the_run(repo: Path) -> None:
    (repo / "a.txt").write_text("dirty before, untouched\n")
    (repo / "b.txt").write_text("dirty before, edited\n")
    before = gitstate.read_state(repo)
    (repo / "b.txt").write_text("edited during the run\n")
    (repo / "dir" / "c.txt").write_text("clean before, edited\n")
    (repo / "created.txt").write_text("new\n")
    after = gitstate.read_state(repo)
    assert gitstate.written_paths(before, after) == ["b.txt", "created.txt", "dir/c.txt"]


def test_reverting_a_dirty_file_counts_as_written(repo: Path) -> None:
    (repo / "a.txt").write_text("dirty\n")
    before = gitstate.read_state(repo)
    git(repo, "checkout", "--", "a.txt")
    assert gitstate.written_paths(before, gitstate.read_state(repo)) == ["a.txt"]


def test_parse_porcelain_handles_every_record_kind() -> None:
    raw = (
        b"# branch.oid abc\0"
        b"1 .M N... 100644 100644 100644 aaa bbb has space.txt\0"
        b"2 R. N... 100644 100644 100644 aaa bbb R100 new\nname\0old name\0"
        b"u UU N... 100644 100644 100644 100644 a b c conflict.txt\0"
        b"? untracked dir/f\0"
        b"! ignored\0"
    )
    assert gitstate.parse_porcelain(raw) == [
        (".M", "has space.txt"),
        ("R.", "new\nname"),
        ("R.", "old name"),
        ("UU", "conflict.txt"),
        ("?", "untracked dir/f"),
    ]


def test_not_a_repository_names_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (tmp_path / ".git").mkdir()  # a stray empty .git above must not count as a repository
    with pytest.raises(UsageError, match="plain is not inside a git repository"):
        gitstate.find_toplevel(folder)


def test_toplevel_of_a_subfolder(repo: Path) -> None:
    assert gitstate.find_toplevel(repo / "dir") == Path(os.path.realpath(repo))


def test_broken_head_raises_run_error(repo: Path) -> None:
    (repo / ".git" / "HEAD").write_text("garbage\n")
    with pytest.raises(RunError, match="git status failed"):
        gitstate.read_state(repo)


def test_head_moved_to_another_commit_is_seen(repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD")
    (repo / "a.txt").write_text("second\n")
    git(repo, "commit", "-qam", "second")
    second = gitstate.read_state(repo)
    (repo / ".git" / "HEAD").write_text(first + "\n")
    moved = gitstate.read_state(repo)
    assert (second.head, moved.head) == (git(repo, "rev-parse", "main"), first)
    assert moved.tree != second.tree


def hook_script(folder: Path, marker: Path) -> Path:
    """An executable that leaves marker behind when git runs it (and passes data through)."""
    script = folder / "hook.sh"
    script.write_text(f"#!/bin/sh\ntouch '{marker}'\ncat\n")
    script.chmod(0o755)
    return script


def test_repository_config_cannot_run_code_while_state_is_read(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {".gitattributes": "*.txt filter=ev.il\n", "a.txt": "a\n"})
    marker = tmp_path / "ran"
    script = hook_script(tmp_path, marker)
    git(repo, "config", "core.fsmonitor", str(script))
    git(repo, "config", "filter.ev.il.clean", str(script))
    git(repo, "config", "filter.ev.il.required", "true")
    git(repo, "config", "diff.external", str(script))
    (repo / "a.txt").write_text("changed\n")
    # The trap is real: plain git status runs the repository's hooks.
    git(repo, "status", "--porcelain")
    assert marker.exists()
    marker.unlink()
    state = gitstate.read_state(repo)
    assert state.dirty == ["a.txt"]
    assert not marker.exists()


def test_filter_names_that_cannot_be_overridden_are_refused(repo: Path) -> None:
    git(repo, "config", "filter.a=b.clean", "cat")
    (repo / "a.txt").write_text("changed\n")
    with pytest.raises(RunError, match="filter named 'a=b'"):
        gitstate.read_state(repo)

"""gitstate on real repositories: HEAD, tree, dirty paths, digests and written paths."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zlib
from pathlib import Path

import pytest
from charpin_runner import gitcmd, gitstate
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
    # Compared with HEAD's tree, not the index: a staged file is simply not in HEAD.
    assert state.contents["staged.txt"].startswith("?:")


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
    (repo / ".charpin" / "notes.txt").write_text("n\n")
    git(repo, "add", ".charpin/notes.txt")
    git(repo, "commit", "-qm", "a tracked file in our folder")
    (repo / ".charpin" / "notes.txt").write_text("edited\n")
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
    with pytest.raises(RunError, match="git rev-parse failed"):
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


def test_odd_filter_names_are_named_and_never_run(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {".gitattributes": "* filter=a=b\n", "a.txt": "a\n"})
    marker = tmp_path / "ran"
    git(repo, "config", "filter.a=b.clean", str(hook_script(tmp_path, marker)))
    (repo / "a.txt").write_text("changed\n")
    state = gitstate.read_state(repo)
    assert state.dirty == ["a.txt"]
    assert state.risky == ["filter.a=b.clean"]
    assert not marker.exists()


# --- measurement ignores what the repository says about itself -------------------------------


def test_include_with_filter_and_info_attributes_never_runs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    marker = tmp_path / "ran"
    script = hook_script(tmp_path, marker)
    (repo / ".git" / "evil.cfg").write_text(
        f'[filter "hide"]\n\tclean = {script}\n\tprocess = {script}\n\trequired = true\n'
        f'[diff "hide"]\n\ttextconv = {script}\n'
    )
    git(repo, "config", "include.path", "evil.cfg")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* filter=hide diff=hide\n")
    (repo / "a.txt").write_text("b\n")  # same size: git must look at the content
    # The trap is real for the user's own git (which then fails on the bogus filter).
    subprocess.run(["git", "-C", str(repo), "status"], capture_output=True, check=False)
    assert marker.exists()
    marker.unlink()
    state = gitstate.read_state(repo)
    assert state.dirty == ["a.txt"]
    assert state.digest != EMPTY
    assert state.risky == [
        "diff.hide.textconv",
        "filter.hide.clean",
        "filter.hide.process",
        "filter.hide.required",
        "include.path",
    ]
    assert not marker.exists()


def test_hooks_and_hooks_path_never_run(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    marker = tmp_path / "ran"
    script = hook_script(tmp_path, marker)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("post-index-change", "reference-transaction", "fsmonitor-watchman"):
        (hooks / name).symlink_to(script)
        (repo / ".git" / "hooks" / name).symlink_to(script)
    git(repo, "config", "core.hooksPath", str(hooks))
    git(repo, "config", "core.fsmonitor", str(script))
    (repo / "a.txt").write_text("changed\n")
    state = gitstate.read_state(repo)
    assert state.dirty == ["a.txt"]
    assert state.risky == ["core.fsmonitor", "core.hookspath"]
    assert not marker.exists()


def test_skip_worktree_and_assume_unchanged_do_not_hide_edits(repo: Path) -> None:
    before = gitstate.read_state(repo)
    (repo / "a.txt").write_text("edited\n")
    (repo / "b.txt").write_text("edited\n")
    git(repo, "update-index", "--skip-worktree", "a.txt")
    git(repo, "update-index", "--assume-unchanged", "b.txt", "dir/c.txt")
    assert git(repo, "status", "--porcelain") == ""  # what a plain git status would say
    after = gitstate.read_state(repo, before)
    assert after.dirty == ["a.txt", "b.txt"]
    assert after.flagged == ["a.txt", "b.txt", "dir/c.txt"]
    # dir/c.txt is unchanged, but flagging it during the run is evidence too.
    assert gitstate.written_paths(before, after) == ["a.txt", "b.txt", "dir/c.txt"]
    assert gitstate.run_findings(before, after) == [
        "the run set skip-worktree or assume-unchanged on a.txt, b.txt, dir/c.txt"
    ]


def test_flags_present_before_are_recorded_and_not_written(repo: Path) -> None:
    git(repo, "update-index", "--skip-worktree", "a.txt")
    before = gitstate.read_state(repo)
    after = gitstate.read_state(repo, before)
    assert before.flagged == after.flagged == ["a.txt"]
    assert gitstate.written_paths(before, after) == []
    assert gitstate.run_findings(before, after) == []


def test_an_info_exclude_added_during_the_run_hides_nothing(repo: Path) -> None:
    before = gitstate.read_state(repo)
    (repo / "secret-output.txt").write_text("x\n")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("secret-output.txt\n")
    assert git(repo, "status", "--porcelain") == ""
    after = gitstate.read_state(repo, before)
    assert after.dirty == ["secret-output.txt"]
    assert gitstate.written_paths(before, after) == ["secret-output.txt"]
    assert gitstate.run_findings(before, after) == ["the run changed .git/info/exclude"]


def test_a_gitignore_with_star_added_during_the_run_hides_nothing(repo: Path) -> None:
    before = gitstate.read_state(repo)
    (repo / "dir" / "new.txt").write_text("x\n")
    (repo / "dir" / ".gitignore").write_text("*\n")
    (repo / ".gitignore").write_text("*\n")
    assert git(repo, "status", "--porcelain", "-uall") == ""
    after = gitstate.read_state(repo, before)
    assert gitstate.written_paths(before, after) == [".gitignore", "dir/.gitignore", "dir/new.txt"]


def test_ignore_rules_in_force_before_the_run_still_apply(repo: Path) -> None:
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore logs")
    (repo / "dir" / ".gitignore").write_text("*\n")  # untracked, ignores itself
    before = gitstate.read_state(repo)
    assert before.dirty == []
    (repo / "run.log").write_text("log\n")
    (repo / "dir" / "cache.bin").write_text("c\n")
    after = gitstate.read_state(repo, before)
    assert after.dirty == []
    assert gitstate.run_findings(before, after) == []


NESTED_RULES = {
    ".gitignore": "*.log\n!keep.log\nbuild/\n/top-only.txt\ndocs/*.tmp\n\\#hash.txt\n",
    "src/.gitignore": "gen\n!important.log\n/local.txt\nsub/deep.txt\n*.o\n!keep.o\n",
    "src/sub/.gitignore": "!*.o\nx?.txt\n",
    "we*rd[1]/.gitignore": "*.dat\n",
    "#dir/.gitignore": "a.txt\n",
    "self/.gitignore": "*\n",
}
NESTED_FILES = [
    "a.log",
    "keep.log",
    "build/out.bin",
    "src/build/out.bin",
    "top-only.txt",
    "src/top-only.txt",
    "docs/x.tmp",
    "docs/in/y.tmp",
    "#hash.txt",
    "src/gen/file.c",
    "src/sub/gen",
    "src/a.log",
    "src/important.log",
    "src/local.txt",
    "src/sub/local.txt",
    "src/sub/deep.txt",
    "src/sub/more/deep.txt",
    "src/x.o",
    "src/keep.o",
    "src/sub/y.o",
    "src/sub/xa.txt",
    "src/xa.txt",
    "we*rd[1]/f.dat",
    "weird1/f.dat",
    "#dir/a.txt",
    "#dir/b.txt",
    "self/any.txt",
    "plain.txt",
]


def test_flattened_ignore_rules_match_what_git_status_ignores(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"tracked.txt": "t\n"})
    for rel, text in NESTED_RULES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    for rel in NESTED_FILES:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(rel)
    raw = git(repo, "-c", "core.quotepath=false", "status", "--porcelain", "-uall")
    expected = sorted(line[3:] for line in raw.splitlines())
    assert "plain.txt" in expected and "src/keep.o" in expected and "a.log" not in expected
    assert gitstate.read_state(repo).dirty == expected


def test_flatten_ignore_rewrites_patterns_for_the_top_level() -> None:
    text = b"\xef\xbb\xbf# comment\n\nfoo\n/bar\nbaz/\na/b\n!neg\n\\!lit\n**/deep\n"
    assert gitstate.flatten_ignore("d*r", text) == [
        b"d\\*r/**/foo",
        b"d\\*r/bar",
        b"d\\*r/**/baz/",
        b"d\\*r/a/b",
        b"!d\\*r/**/neg",
        b"d\\*r/**/\\!lit",
        b"d\\*r/**/deep",
    ]
    assert gitstate.flatten_ignore("", b"foo\n/bar\n") == [b"foo", b"/bar"]


def test_the_users_global_excludes_file_is_honoured(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text(".idea/\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    (repo / ".idea").mkdir()
    (repo / ".idea" / "workspace.xml").write_text("<x/>")
    before = gitstate.read_state(repo)
    assert before.dirty == []
    # Emptying the global file during the run changes nothing measured, and is reported.
    (home / ".config" / "git" / "ignore").write_text("")
    (repo / ".idea" / "other.xml").write_text("<y/>")
    after = gitstate.read_state(repo, before)
    assert after.dirty == []
    assert gitstate.run_findings(before, after) == [
        "the run changed the global excludes file (core.excludesFile)"
    ]


def test_core_worktree_pointing_at_a_pristine_copy_changes_nothing(
    repo: Path, tmp_path: Path
) -> None:
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    for rel in ("a.txt", "b.txt", "dir/c.txt"):
        (pristine / rel).parent.mkdir(parents=True, exist_ok=True)
        (pristine / rel).write_text((repo / rel).read_text())
    before = gitstate.read_state(repo)
    (repo / "a.txt").write_text("edited\n")
    git(repo, "config", "core.worktree", str(pristine))
    assert git(repo, "status", "--porcelain") == ""
    assert gitstate.find_toplevel(repo / "dir") == Path(os.path.realpath(repo))
    after = gitstate.read_state(repo, before)
    assert after.dirty == ["a.txt"]
    assert after.risky == ["core.worktree"]
    assert gitstate.run_findings(before, after) == [
        "the run changed the repository's git config: core.worktree",
        "the run changed .git/config",
    ]
    # Left in place, it is named before every later run, as a note: measured around, and not
    # that run's doing (a husky hooksPath or git-lfs filter must not fail every receipt).
    assert gitstate.run_findings(after, gitstate.read_state(repo, after)) == []
    assert gitstate.setup_notes(after)[0].startswith(
        "note: the repository's git config sets core.worktree"
    )


def test_core_bare_does_not_stop_the_measurement(repo: Path) -> None:
    git(repo, "config", "core.bare", "true")
    (repo / "a.txt").write_text("edited\n")
    assert gitstate.find_toplevel(repo) == Path(os.path.realpath(repo))
    state = gitstate.read_state(repo)
    assert state.dirty == ["a.txt"]
    assert state.risky == ["core.bare"]


def test_sparse_checkout_and_ignore_stat_do_not_hide_edits(repo: Path) -> None:
    git(repo, "config", "core.sparseCheckout", "true")
    git(repo, "config", "core.ignoreStat", "true")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "sparse-checkout").write_text("/a.txt\n")
    (repo / "b.txt").write_text("edited\n")
    state = gitstate.read_state(repo)
    assert state.dirty == ["b.txt"]
    assert state.risky == ["core.ignorestat", "core.sparsecheckout"]


def test_a_replace_ref_cannot_swap_heads_tree(repo: Path) -> None:
    (repo / "a.txt").write_text("edited\n")
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "add", "a.txt")
    tree = git(repo, "write-tree")
    fake = git(repo, "commit-tree", tree, "-m", "looks like HEAD")
    git(repo, "replace", head, fake)
    assert git(repo, "status", "--porcelain") == ""  # the user's git now compares the fake
    state = gitstate.read_state(repo)
    assert state.tree == git(repo, "--no-replace-objects", "rev-parse", "HEAD^{tree}")
    assert state.dirty == ["a.txt"]


def test_an_untracked_gitattributes_in_an_ignored_folder_is_part_of_the_state(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "r", {".gitignore": "vendor/\n", "a.txt": "a\n"})
    (repo / "vendor").mkdir()
    (repo / "vendor" / "lib.txt").write_text("lib\n")
    git(repo, "add", "-f", "vendor/lib.txt")
    git(repo, "commit", "-qm", "vendored")
    before = gitstate.read_state(repo)
    (repo / "vendor" / ".gitattributes").write_text("*.txt text eol=crlf\n")
    after = gitstate.read_state(repo, before)
    assert gitstate.written_paths(before, after) == ["vendor/.gitattributes"]


def test_a_linked_worktree_is_measured_in_its_own_folder(repo: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked))
    (linked / "a.txt").write_text("edited in the linked tree\n")
    assert gitstate.find_toplevel(linked / "dir") == Path(os.path.realpath(linked))
    assert gitstate.read_state(linked).dirty == ["a.txt"]
    assert gitstate.read_state(repo).dirty == []


def test_a_sha256_repository_is_measured(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "--object-format=sha256", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    (repo / "a.txt").write_text("b\n")
    state = gitstate.read_state(repo)
    assert len(state.head) == 64
    assert state.dirty == ["a.txt"]


def test_a_repository_without_commits_reads_unresolved(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    state = gitstate.read_state(repo)
    assert (state.head, state.tree, state.dirty) == ("unresolved", "unresolved", ["a.txt"])


def test_a_head_naming_a_missing_commit_raises(repo: Path) -> None:
    (repo / ".git" / "HEAD").write_text("0" * 40 + "\n")
    with pytest.raises(RunError, match="git cannot resolve HEAD"):
        gitstate.read_state(repo)


# --- names, hangs, code and objects the run could plant ---------------------------------------


def test_escaped_names_are_sorted_and_never_collide(tmp_path: Path) -> None:
    # A name spelt `a\xff` (tracked) and one ending in byte 0xff (untracked) must stay two paths.
    literal = "a\\xff"
    repo = make_repo(tmp_path / "r", {literal: "one\n", "ab": "b\n"})
    (repo / os.fsdecode(b"a\xff")).write_text("byte\n")
    before = gitstate.read_state(repo)
    assert before.dirty == ["a\\xff"]  # the byte, escaped
    (repo / literal).write_text("two\n")
    (repo / "ab").write_text("c\n")
    (repo / "back\\slash").write_text("s\n")
    after = gitstate.read_state(repo, before)
    # Only a backslash that would read as an escape is doubled; `back\slash` stays as it was.
    assert after.dirty == ["a\\\\xff", "a\\xff", "ab", "back\\slash"]
    assert after.dirty == sorted(after.dirty)
    # The edit of the tracked file is not hidden behind the untracked one of the same spelling.
    assert gitstate.written_paths(before, after) == ["a\\\\xff", "ab", "back\\slash"]


@pytest.mark.parametrize("name", ["objects/info/alternates", "packed-refs", "config"])
def test_a_fifo_in_the_git_directory_is_an_error_not_a_hang(
    repo: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gitstate, "MEASURE_SECONDS", 1.0)
    target = repo / ".git" / name
    target.unlink(missing_ok=True)
    os.mkfifo(target)
    with pytest.raises(RunError, match="did not finish within 1 s"):
        gitstate.read_state(repo)


def test_a_partial_clone_lazy_fetch_never_runs(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "upload-pack.sh"
    script.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    script.chmod(0o755)
    upstream = tmp_path / "up.git"
    git(repo, "clone", "-q", "--bare", str(repo), str(upstream))
    head = git(repo, "rev-parse", "HEAD")
    for key, value in {
        "core.repositoryformatversion": "1",
        "extensions.partialClone": "origin",
        "remote.origin.url": str(upstream),
        "remote.origin.promisor": "true",
        "remote.origin.uploadpack": str(script),
    }.items():
        git(repo, "config", key, value)
    (repo / ".git" / "objects" / head[:2] / head[2:]).unlink()
    with pytest.raises(RunError, match="git cannot resolve HEAD"):
        gitstate.read_state(repo)
    assert not marker.exists()
    # The trap was real: the user's own git runs it while looking for the commit.
    subprocess.run(["git", "-C", str(repo), "log", "-1"], capture_output=True, check=False)
    assert marker.exists()


def forge_tree(repo: Path, folder: str, path: str) -> None:
    """Rewrite the loose tree object of HEAD:folder so that it names path's current content."""
    tree = git(repo, "rev-parse", f"HEAD:{folder}")
    old = bytes.fromhex(git(repo, "rev-parse", f"HEAD:{path}"))
    new = bytes.fromhex(git(repo, "hash-object", "-w", path))
    body = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "tree", tree], capture_output=True, check=True
    ).stdout.replace(old, new)
    loose = repo / ".git" / "objects" / tree[:2] / tree[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"tree %d\0" % len(body) + body))


def test_a_rewritten_tree_object_does_not_hide_an_edit(repo: Path) -> None:
    before = gitstate.read_state(repo)
    (repo / "dir" / "c.txt").write_text("edited\n")
    forge_tree(repo, "dir", "dir/c.txt")
    after = gitstate.read_state(repo, before)
    assert after.tree == before.tree
    assert after.dirty == ["dir/c.txt"]
    assert gitstate.written_paths(before, after) == ["dir/c.txt"]


def test_a_checkout_owned_by_another_user_is_measured_where_the_user_trusts_it(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI containers check out as one user and run as another; the user's global safe.directory
    # must keep working although measurement git reads no global config.
    if os.geteuid() != 0:
        pytest.skip("needs root to give the checkout to another user (CI runs as root)")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    subprocess.run(["chown", "-R", "65534", str(repo)], check=True)
    gitcmd.user_safe_directories.cache_clear()
    with pytest.raises(UsageError, match=r"dubious ownership.*safe\.directory"):
        gitstate.find_toplevel(repo)
    subprocess.run(["git", "config", "--global", "--add", "safe.directory", str(repo)], check=True)
    gitcmd.user_safe_directories.cache_clear()
    try:
        (repo / "a.txt").write_text("edited\n")
        assert gitstate.find_toplevel(repo) == Path(os.path.realpath(repo))
        assert gitstate.read_state(repo).dirty == ["a.txt"]
    finally:
        gitcmd.user_safe_directories.cache_clear()

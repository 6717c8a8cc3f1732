"""Check the staged change or each commit of a range. Runs on any box; stdlib only.

A merge commit is judged by what the merge itself changes (paths that differ from every parent):
the merged commits are checked one by one in the range already, and comparing a merge with its
first parent would refuse every merge of a branch that kept pins and code in separate commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from charpin_runner.guard import gitio
from charpin_runner.guard.protect import (
    PYPROJECT,
    TABLE_LABEL,
    Protected,
    Split,
    is_doc,
    paths_for,
    pyproject_changes,
    split_pyproject,
)

REST_LABEL = "pyproject.toml (outside [tool.charpin])"


@dataclass(frozen=True)
class Verdict:
    """One change set: its protected paths and its production-code paths."""

    label: str
    protected: list[str]
    code: list[str]

    @property
    def refused(self) -> bool:
        return bool(self.protected) and bool(self.code)


def classify(
    paths: list[str], protected: Protected, pyproject: tuple[bool, bool]
) -> tuple[list[str], list[str]]:
    """Sort changed paths into (protected, code); docs are neither."""
    guarded: list[str] = []
    code: list[str] = []
    for path in paths:
        if path == PYPROJECT:
            table_changed, rest_changed = pyproject
            if table_changed:
                guarded.append(TABLE_LABEL)
            if rest_changed:
                code.append(REST_LABEL)
        elif protected.covers(path):
            guarded.append(path)
        elif not is_doc(path):
            code.append(path)
    return sorted(guarded), sorted(code)


def _judge(label: str, paths: list[str], new: Split, olds: list[Split]) -> Verdict:
    flags = pyproject_changes(new, olds) if PYPROJECT in paths else (False, False)
    guarded, code = classify(paths, paths_for([new, *olds]), flags)
    return Verdict(label, guarded, code)


def check_staged(repo: Path) -> Verdict:
    """The index against HEAD (against nothing before the first commit)."""
    paths = gitio.staged_paths(repo)
    new = split_pyproject(gitio.show(repo, gitio.INDEX, PYPROJECT))
    olds = [split_pyproject(gitio.show(repo, "HEAD", PYPROJECT))] if gitio.has_head(repo) else []
    return _judge("the staged change", paths, new, olds)


def check_commit(repo: Path, commit: str) -> Verdict:
    """One commit against its parent; a merge against all of its parents (see module doc)."""
    parents = gitio.parents(repo, commit)
    if parents:
        per_parent = [set(gitio.commit_paths(repo, commit, p)) for p in parents]
        paths = sorted(set.intersection(*per_parent))
    else:
        paths = gitio.commit_paths(repo, commit, None)
    new = split_pyproject(gitio.show(repo, commit, PYPROJECT))
    olds = [split_pyproject(gitio.show(repo, p, PYPROJECT)) for p in parents]
    label = f"commit {commit[:12]} {gitio.subject(repo, commit)!r}"
    return _judge(label, paths, new, olds)


def check_range(repo: Path, spec: str) -> list[Verdict]:
    """Every commit in REV..REV, oldest first."""
    return [check_commit(repo, commit) for commit in gitio.rev_list(repo, spec)]

"""Check the staged change or each commit of a range. Runs on any box; stdlib only.

A merge commit is judged by what the merge itself changes (paths that differ from every parent):
the merged commits are checked one by one in the range already, and comparing a merge with its
first parent would refuse every merge of a branch that kept pins and code in separate commits.

Symlinks are followed in the commit's tree and in its parents' trees (for the staged change: the
index and HEAD): the real file behind a protected link is protected, and a change that adds or
retargets a link at, inside, or to a protected path is refused on its own (see links.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from charpin_runner.guard import gitio
from charpin_runner.guard.links import LinkFacts, expand
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
    """One change set: its protected paths, its production-code paths, and the protected
    symlinks it adds or retargets ("link -> target")."""

    label: str
    protected: list[str]
    code: list[str]
    links: list[str] = field(default_factory=list)

    @property
    def mixes(self) -> bool:
        return bool(self.protected) and bool(self.code)

    @property
    def refused(self) -> bool:
        return self.mixes or bool(self.links)


@dataclass(frozen=True)
class _Trees:
    """What the symlinks of the new tree and of every old tree say (see links.expand)."""

    new: LinkFacts
    olds: list[LinkFacts]

    @property
    def all(self) -> list[LinkFacts]:
        return [self.new, *self.olds]


def classify(
    paths: list[str],
    protected: Protected,
    pyproject: tuple[bool, bool],
    trees: _Trees | None = None,
) -> tuple[list[str], list[str]]:
    """Sort changed paths into (protected, code); docs are neither."""
    facts = trees.all if trees else []
    for fact in facts:
        protected = protected.merged(fact.protected)
    via = {k: v for fact in reversed(facts) for k, v in fact.via.items()}
    reached = {t for fact in facts for t in fact.code_targets}
    guarded: list[str] = []
    code: list[str] = []
    for path in paths:
        entry = protected.entry_for(path)
        if path == PYPROJECT:
            table_changed, rest_changed = pyproject
            if table_changed:
                guarded.append(TABLE_LABEL)
            if rest_changed:
                code.append(REST_LABEL)
        elif entry is not None:
            link = via.get(entry)
            guarded.append(f"{path} (protected through symlink {link})" if link else path)
        elif not is_doc(path) or _under(path, reached):
            # A doc file that a code path links to is code: `app.py -> docs/impl.py`.
            code.append(path)
    return sorted(guarded), sorted(code)


def _under(path: str, roots: set[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _judge(
    label: str,
    paths: list[str],
    new: Split,
    olds: list[Split],
    links: tuple[dict[str, str], list[dict[str, str]]],
) -> Verdict:
    flags = pyproject_changes(new, olds) if PYPROJECT in paths else (False, False)
    base = paths_for([new, *olds])
    new_links, old_links = links
    # pyproject.toml joins for link purposes: behind a link, edits to the real file would change
    # [tool.charpin] unseen (git shows the link, and `show` returns the target's name).
    linked = base.merged(Protected((PYPROJECT,), ()))
    trees = _Trees(
        expand(linked, new_links, is_doc), [expand(linked, old, is_doc) for old in old_links]
    )
    guarded, code = classify(paths, base, flags, trees)
    # Only links this change adds or retargets: removing one (the fix) is a plain protected change.
    changed = set(paths)
    named = sorted(desc for link, desc in trees.new.named.items() if link in changed)
    return Verdict(label, guarded, code, named)


def check_staged(repo: Path, index_file: Optional[str] = None) -> Verdict:
    """The index against HEAD (against nothing before the first commit). index_file is the
    index git is about to commit when it is not the repository's own (see gitio)."""
    paths = gitio.staged_paths(repo, index_file)
    new = split_pyproject(gitio.show(repo, gitio.INDEX, PYPROJECT, index_file))
    head = gitio.has_head(repo)
    olds = [split_pyproject(gitio.show(repo, "HEAD", PYPROJECT))] if head else []
    old_links = [gitio.symlinks(repo, "HEAD")] if head else []
    links = (gitio.symlinks(repo, gitio.INDEX, index_file), old_links)
    return _judge("the staged change", paths, new, olds, links)


def check_commit(
    repo: Path, commit: str, cache: dict[str, dict[str, str]] | None = None
) -> Verdict:
    """One commit against its parent; a merge against all of its parents (see module doc)."""
    cache = {} if cache is None else cache

    def links_of(rev: str) -> dict[str, str]:
        if rev not in cache:
            cache[rev] = gitio.symlinks(repo, rev)
        return cache[rev]

    parents = gitio.parents(repo, commit)
    if parents:
        per_parent = [set(gitio.commit_paths(repo, commit, p)) for p in parents]
        paths = sorted(set.intersection(*per_parent))
    else:
        paths = gitio.commit_paths(repo, commit, None)
    new = split_pyproject(gitio.show(repo, commit, PYPROJECT))
    olds = [split_pyproject(gitio.show(repo, p, PYPROJECT)) for p in parents]
    label = f"commit {commit[:12]} {gitio.subject(repo, commit)!r}"
    links = (links_of(commit), [links_of(p) for p in parents])
    return _judge(label, paths, new, olds, links)


def check_range(repo: Path, spec: str) -> list[Verdict]:
    """Every commit in REV..REV, oldest first (each tree's symlinks are listed once)."""
    cache: dict[str, dict[str, str]] = {}
    return [check_commit(repo, commit, cache) for commit in gitio.rev_list(repo, spec)]

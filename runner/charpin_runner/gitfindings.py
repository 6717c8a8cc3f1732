"""What a run changed in a repository's git setup, and the risky setup it found there before.
Runs on boxes; stdlib only; imports only charpin_runner.gitwatch (GitState is gitstate's)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from charpin_runner import gitwatch

if TYPE_CHECKING:
    from charpin_runner.gitstate import GitState

# Files in the git directory that steer what git sees or runs: (where, name); "common" files
# are shared by linked worktrees, "own" ones belong to this worktree's git directory.
CONTROL_FILES = (
    ("common", "config"),
    ("own", "config.worktree"),
    ("common", "info/exclude"),
    ("common", "info/attributes"),
    ("own", "info/sparse-checkout"),
    ("common", "objects/info/alternates"),
)
# Repository config that changes which files or contents git looks at, or runs code while it
# looks. Boolean keys count only when true; the others whenever they are set.
_RISKY_BOOL = frozenset(
    (
        "core.bare",
        "core.sparsecheckout",
        "core.sparsecheckoutcone",
        "core.ignorestat",
    )
)
_RISKY_SET = frozenset(
    (
        "core.worktree",
        "core.hookspath",
        "core.excludesfile",
        "core.attributesfile",
        "diff.external",
        "include.path",
    )
)
_FALSE = ("false", "no", "off", "0", "")


def written_paths(before: GitState, after: GitState) -> list[str]:
    """Paths whose content or git status differs between two states, and paths the run
    flagged skip-worktree or assume-unchanged in the index (a way to hide an edit)."""
    keys = set(before.contents) | set(after.contents)
    changed = {k for k in keys if before.contents.get(k) != after.contents.get(k)}
    return sorted(changed | (set(after.flagged) - set(before.flagged)))


def setup_notes(before: GitState) -> list[str]:
    """Risky git setup already present before the run (husky's hooksPath, git-lfs filters, a
    sparse checkout): the user's, not the run's doing, and measured around, so informational."""
    out: list[str] = []
    if before.risky:
        out.append(
            "note: the repository's git config sets "
            + _few(before.risky)
            + ": settings that change which files git looks at or run code; charpin measured "
            "without them"
        )
    return out + [f"note: before the run, {f}" for f in before.findings]


def run_findings(before: GitState, after: GitState) -> list[str]:
    """What the run changed in the repository's git setup, one sentence per problem: `.git/`
    config, control files, index flags, the git directory itself. Each one means the run
    cannot be taken as clean (see setup_notes for what was there before)."""
    out = [f"after the run, {f}" for f in after.findings if f not in before.findings]
    if after.git_dir and before.git_dir and after.git_dir != before.git_dir:
        out.append("the run moved the repository's git directory (.git was replaced)")
    keys = _changed_keys(before.config, after.config)
    if keys:
        out.append(f"the run changed the repository's git config: {_few(keys)}")
    controls = sorted(
        label
        for label in set(before.controls) | set(after.controls)
        if before.controls.get(label, "absent") != after.controls.get(label, "absent")
    )
    if controls:
        out.append(f"the run changed {_few(controls)}")
    said = set(controls)
    moved = [
        line
        for line in gitwatch.changes(before.gitdir, after.gitdir)
        if line.rsplit(" (", 1)[0] not in said
    ]
    if before.gitdir and after.gitdir and moved:
        # Rule 4: anything else under .git (refs of any kind, packed-refs, info/, objects/info/,
        # packs and their indexes) can change what later git commands read.
        out.append(f"the run changed the repository's git directory: {_few(moved)}")
    flagged = sorted(set(after.flagged) - set(before.flagged))
    if flagged:
        out.append(f"the run set skip-worktree or assume-unchanged on {_few(flagged)}")
    return out


def risky(config: Iterable[str]) -> list[str]:
    found = set()
    for entry in config:
        key, _, value = entry.partition("\0")
        name = key.lower()
        section, _, rest = name.partition(".")
        variable = rest.rsplit(".", 1)[-1]
        if name in _RISKY_BOOL:
            if value.strip().lower() not in _FALSE:
                found.add(key)
        elif name == "core.fsmonitor":
            if value.strip().lower() not in _FALSE:
                found.add(key)
        elif name in _RISKY_SET or (section == "includeif" and variable == "path"):
            found.add(key)
        elif section == "filter" and rest.count(".") >= 1:
            found.add(key)
        elif section == "diff" and variable in ("textconv", "command"):
            found.add(key)
    return sorted(found)


def _changed_keys(before: Sequence[str], after: Sequence[str]) -> list[str]:
    def by_key(entries: Sequence[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for entry in entries:
            key, _, value = entry.partition("\0")
            out.setdefault(key, []).append(value)
        return out

    old, new = by_key(before), by_key(after)
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def _few(items: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")

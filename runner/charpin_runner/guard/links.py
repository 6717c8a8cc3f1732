"""Follow symlinks stored in one git tree to protected paths. Runs anywhere; stdlib only; pure.

Git stores a symlink as a blob holding its target, and a diff names the path that changed, never
what a link points at. Without this module `pins.jsonl -> data/p.jsonl` (made in one commit) lets a
later commit change `data/p.jsonl` together with code, and the guard sees only "code".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from charpin_runner.guard.protect import Protected

OUTSIDE = "outside the repository"
LOOP = "a symlink loop"
_MAX_HOPS = 40  # the kernel's own limit (ELOOP)


@dataclass(frozen=True)
class Resolved:
    """Where a path really is: `real` is None when it leaves the repository or loops."""

    real: str | None
    hops: tuple[str, ...]
    problem: str = ""


def resolve(path: str, links: dict[str, str]) -> Resolved:
    """Resolve every component of a repo-relative path through the tree's symlinks."""
    pending = [p for p in reversed(path.split("/"))]
    done: list[str] = []
    hops: list[str] = []
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                return Resolved(None, tuple(hops), OUTSIDE)
            done.pop()
            continue
        here = "/".join([*done, part])
        target = links.get(here)
        if target is None:
            done.append(part)
            continue
        hops.append(here)
        if len(hops) > _MAX_HOPS:
            return Resolved(None, tuple(hops), LOOP)
        if target.startswith("/") or not target:
            return Resolved(None, tuple(hops), OUTSIDE)
        # The target is relative to the link's folder, which `done` already holds.
        pending.extend(reversed(target.split("/")))
    return Resolved("/".join(done), tuple(hops))


@dataclass
class LinkFacts:
    """What the symlinks of one tree add to the protected paths.

    `named`: link path -> "link -> target" for every link that is, leads to, lives in, or points
    at a protected path. `via`: protected entry reached through a link -> that link.
    `code_targets`: real paths reached through a link that is not documentation.
    """

    protected: Protected
    named: dict[str, str] = field(default_factory=dict)
    via: dict[str, str] = field(default_factory=dict)
    code_targets: set[str] = field(default_factory=set)


def expand(base: Protected, links: dict[str, str], is_doc: Callable[[str], bool]) -> LinkFacts:
    """Grow the protected paths through one tree's symlinks until nothing new is found."""
    files = set(base.files)
    folders = set(base.folders)
    named: dict[str, str] = {}
    via: dict[str, str] = {}
    resolved = {link: resolve(link, links) for link in links}

    def name(link: str) -> bool:
        if link in named:
            return False
        problem = resolved[link].problem
        named[link] = f"{link} -> {links[link]}" + (f" ({problem})" if problem else "")
        return True

    def covered(path: str) -> bool:
        # Named links stay out: a link *to* the pins does not make its target's folder protected.
        return path in files or any(path.startswith(f + "/") for f in folders)

    def above(path: str) -> bool:
        # "" is the repository root: a link to it reaches every protected path.
        return not path or any(p == path or p.startswith(path + "/") for p in files | folders)

    grew = True
    while grew:
        grew = False
        for entry, is_folder in [(f, False) for f in sorted(files)] + [
            (d, True) for d in sorted(folders)
        ]:
            found = resolve(entry, links)
            for hop in found.hops:
                grew |= name(hop)
            real = found.real
            if real is not None and real != entry and real not in (folders if is_folder else files):
                (folders if is_folder else files).add(real)
                via.setdefault(real, found.hops[0])
                grew = True
        for link, found in resolved.items():
            inside = covered(link)
            if not inside and not (
                found.real is not None and (covered(found.real) or above(found.real))
            ):
                continue
            grew |= name(link)
            for hop in found.hops:
                grew |= name(hop)
            real = found.real
            if inside and real is not None and not (real in files and real in folders):
                # A link inside a case folder makes its target part of the case, file or folder.
                if not covered(real):
                    via.setdefault(real, link)
                files.add(real)
                folders.add(real)
                grew = True
    code_targets = {
        found.real
        for link, found in resolved.items()
        if found.real is not None and not is_doc(link)
    }
    # Retargeting a named link changes what a protected path holds: the link is protected too.
    protected = Protected(tuple(sorted(files | set(named))), tuple(sorted(folders)))
    return LinkFacts(protected, named, via, code_targets)

"""Coordinator side; stdlib and verify's gitread, testside, harness, scope and unread only. What
the patched code is judged with, and what of the patch may not choose it.

A patch never chooses its own judge (rule 6 of the threat model). So:

* the judged run is the patched tree with the base's test side put back (its tests, conftests,
  test data and pytest configuration), plus the protected paths; every run reads the base's
  pytest configuration file (`config_args`);
* a changed file verify cannot place on one side (a test module production imports, a file
  whose side the patch moves, or one the base run's collection contradicts) leaves the verdict
  INCOMPLETE, naming it;
* the patch's own new or edited test files run on their own afterwards, in the patched tree as
  it is (`own` run): a new test that fails is a failure, but none of them can hide one;
* a patch that changes the harness itself (a conftest, pytest's configuration or its section of
  a shared file, sitecustomize/usercustomize, a .pth file, something under *.dist-info or
  *.egg-info, byte code without its source, a new top-level module named like the standard
  library or pytest) is a Protected paths finding naming the file, and so is a file charpin
  cannot read (verify/unread.py);
* production lines the patch adds are read for references to the harness (harness.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from charpin_coordinator.verify import gitread, harness, testside, unread
from charpin_coordinator.verify.scope import python_shebang

# Top-level names a new module of the repository must not take: it would be imported instead of
# the real one by anything that runs with the checkout on sys.path.
_SHADOWED = frozenset(sys.stdlib_module_names) | {
    "pytest",
    "_pytest",
    "pluggy",
    "py",
    "xdist",
    "charpin_runner",
    "charpin_coordinator",
}
_MIXED = ("pyproject.toml", "setup.cfg", "tox.ini")


@dataclass(frozen=True)
class Judging:
    """How one patch is judged."""

    side: testside.TestSide
    restore: list[str]  # paths the judged run takes from the base
    harness: list[str]  # harness changes, `path (why)`: Protected paths findings
    own: list[str]  # the patch's own new or edited test files (the own-tests run)
    edited: list[str]
    deleted: list[str]
    added: list[str]
    harness_aware: list[str]  # production lines that look at the harness, as shown
    # Changed files that are neither test side nor production for sure, `path (why)`: the
    # Scope gate is INCOMPLETE (nothing decides a change verify cannot place).
    undecided: list[str] = field(default_factory=list)
    # The file every run's pytest reads (`--config-file`): the base's pytest configuration, else
    # its pyproject.toml; "" when the base has neither.
    config_file: str = ""


def judging(repo: Path, base: str, patched: str, changed: tuple[str, ...]) -> Judging:
    """Everything the verify needs to know about the test side of this patch."""
    base_tree = gitread.tree_files(repo, base)
    patched_tree = gitread.tree_files(repo, patched)
    base_side = _side(repo, base_tree)
    patched_side = _side(repo, patched_tree)
    side = testside.merged(base_side, patched_side)
    found = _harness_changes(repo, base_tree, patched_tree, changed)
    production = [c for c in changed if not side.covers(c)]
    found += unread.findings(repo, patched_tree, production, side.production_dirs)
    found += [
        f"{path} (imported only by the tests: the judged run takes the base's, so this change "
        "would not be judged)"
        for path in changed
        if path in side.test_only
    ]
    mixed = [p.split(" ", 1)[0] for p in found if PurePosixPath(p.split(" ", 1)[0]).name in _MIXED]
    restore = sorted({*side.files, *(c for c in changed if side.covers(c)), *mixed})
    tests = [c for c in changed if side.covers(c) and not testside.is_harness_file(c)]
    own = sorted(c for c in tests if c in patched_tree and c.endswith(".py") and _test_file(side, c))
    pyproject = "pyproject.toml" if "pyproject.toml" in base_tree else ""
    return Judging(
        side=side,
        restore=restore,
        harness=found,
        own=own,
        edited=sorted(c for c in tests if c in base_tree and c in patched_tree),
        deleted=sorted(c for c in tests if c in base_tree and c not in patched_tree),
        added=sorted(c for c in tests if c not in base_tree),
        harness_aware=_aware(repo, base, patched, changed, side, patched_tree),
        undecided=_undecided(changed, base_side, patched_side),
        config_file=base_side.config_file or pyproject,
    )


def _side(repo: Path, tree: dict[str, tuple[str, str]]) -> testside.TestSide:
    wanted = {p: sha for p, (_, sha) in tree.items() if _feeds_side(p)}
    blobs = gitread.blobs(repo, wanted.values())
    return testside.find(tree, {p: blobs[sha] for p, sha in wanted.items() if sha in blobs})


def _undecided(
    changed: tuple[str, ...], base: testside.TestSide, patched: testside.TestSide
) -> list[str]:
    """Changed files verify cannot place on one side: a test module production imports, or a
    file that is test side in one commit and production in the other (`path (why)`)."""
    out: list[str] = []
    for path in changed:
        why = base.both.get(path) or patched.both.get(path)
        if why:
            out.append(f"{path} ({why})")
        elif path in base.known and path in patched.known:
            if base.covers(path) != patched.covers(path):
                was = "test side" if base.covers(path) else "production"
                out.append(f"{path} ({was} on base, not on patched: the patch moves what judges)")
    return out


def collection_disagrees(
    side: testside.TestSide, changed: Sequence[str], collected: Iterable[str]
) -> list[str]:
    """Changed files of the base whose place the base run's collection contradicts: restored as
    the base's test modules though the base collected no test from them (the patch's change
    there would go unjudged), or judged as production though the base collected tests from them
    (the patch would choose those tests). collected: the base receipts' node ids."""
    files = {nodeid.split("::", 1)[0] for nodeid in collected}
    if not files & side.known:
        return []  # the ids are not relative to the checkout's top: nothing to compare with
    out: list[str] = []
    for path in changed:
        if path not in side.known or not path.endswith(".py") or path in side.both:
            continue
        if path in side.modules and path not in files:
            out.append(
                f"{path} (taken as a test module, but the base run collected no test from it: "
                "its change would not be judged)"
            )
        elif path in files and not side.covers(path):
            out.append(
                f"{path} (the base run collected tests from it, and it is judged as production: "
                "the patch would choose those tests)"
            )
    return out


def pin_inputs(repo: Path, base: str, pins_file: str) -> list[str]:
    """The folders the base's pins read as their input (`fixtures` of each pins.jsonl line):
    a patch that rewrites them could keep a changed output golden."""
    tree = gitread.tree_files(repo, base)
    entry = tree.get(pins_file)
    if entry is None or entry[0] not in gitread.REGULAR:
        return []
    data = gitread.blobs(repo, [entry[1]]).get(entry[1], b"")
    found: set[str] = set()
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        folder = record.get("fixtures") if isinstance(record, dict) else None
        if isinstance(folder, str) and folder.strip("/") and ".." not in folder.split("/"):
            found.add(folder.strip("/"))
    return sorted(found)


def _feeds_side(path: str) -> bool:
    return path.endswith(".py") or path in (*testside.CONFIG_FILES, "pyproject.toml", "setup.cfg")


def _test_file(side: testside.TestSide, path: str) -> bool:
    """A file pytest would collect: under a test root or named like a test file."""
    name = PurePosixPath(path).name
    if name == "__init__.py":
        return False
    return any(path.startswith(r + "/") for r in side.roots) or side.covers(path)


def _harness_changes(
    repo: Path,
    base_tree: dict[str, tuple[str, str]],
    patched_tree: dict[str, tuple[str, str]],
    changed: tuple[str, ...],
) -> list[str]:
    found: list[str] = []
    for path in changed:
        why = _harness_why(path, path not in base_tree)
        if why:
            found.append(f"{path} ({why})")
    for name in changed:
        if PurePosixPath(name).name not in _MIXED or testside.is_harness_file(name):
            continue
        sides = [tree.get(name) for tree in (base_tree, patched_tree)]
        data = gitread.blobs(repo, [s[1] for s in sides if s is not None])
        texts = [
            testside.section_text(PurePosixPath(name).name, data[s[1]]) if s else None
            for s in sides
        ]
        if texts[0] != texts[1]:
            section = testside.SECTIONS[PurePosixPath(name).name]
            found.append(f"{name} {section} (pytest configuration)")
    return found


def _harness_why(path: str, added: bool) -> str:
    pure = PurePosixPath(path)
    parts = pure.parts
    if pure.name == "conftest.py":
        return "a conftest"
    if testside.is_harness_file(path):
        return "pytest configuration: the judged run uses the base's"
    if added and pure.name == "setup.cfg":
        return "a new setup.cfg: pytest and setuptools read it; the judged run uses the base's"
    if pure.name in ("sitecustomize.py", "usercustomize.py"):
        return "runs in every interpreter that finds it"
    if pure.suffix == ".pth":
        return "a .pth file runs at interpreter start"
    if any(p.endswith((".dist-info", ".egg-info")) for p in parts[:-1]):
        return "installed-package metadata (plugins are autoloaded from it)"
    if pure.suffix == ".pyc" and "__pycache__" not in parts:
        return "byte code without its source"
    top = parts[0].removesuffix(".py") if parts else ""
    is_module = len(parts) == 1 and pure.suffix == ".py"
    is_package = len(parts) == 2 and pure.name == "__init__.py"
    if added and (is_module or is_package) and top in _SHADOWED:
        return f"shadows {top}, which everything with the checkout on sys.path would import"
    return ""


def _aware(
    repo: Path,
    base: str,
    patched: str,
    changed: tuple[str, ...],
    side: testside.TestSide,
    tree: dict[str, tuple[str, str]],
) -> list[str]:
    production = [p for p in changed if p in tree and not side.covers(p)]
    if not production:
        return []
    diff = gitread.git(repo, "diff", "-U0", "--no-color", "--no-ext-diff", "--no-textconv",
                       "--src-prefix=a/", "--dst-prefix=b/", base, patched, "--", *production)
    added = harness.added_lines(diff)
    shas = {p: tree[p][1] for p in production if p in added and tree[p][0] in gitread.REGULAR}
    blobs = gitread.blobs(repo, shas.values())
    found: list[str] = []
    for path, sha in sorted(shas.items()):
        source = blobs.get(sha, b"")
        if not (path.endswith(".py") or python_shebang(source)):
            continue
        found += [f.shown() for f in harness.scan(path, source, added[path])]
    return found


_CONFIG_OPTIONS = ("-c", "--config-file", "--inifile", "--rootdir")


def config_args(
    config_file: str, test_command: Sequence[str], pytest_args: Sequence[str]
) -> list[str]:
    """The pytest options that pin every run of a verify to the base's configuration file (its
    pytest settings, else its pyproject.toml, which roots pytest at the top): a pytest.toml or
    pytest.ini the patch adds anywhere is never read. Nothing when the base has no such file,
    its own arguments already choose one, or its test command is not pytest (then the restored
    files and the Protected paths finding are what hold)."""
    if not config_file:
        return []
    if test_command and not any(PurePosixPath(w).name.startswith("pytest") for w in test_command):
        return []
    if any(a.split("=", 1)[0] in _CONFIG_OPTIONS or a.startswith("-c") for a in pytest_args):
        return []
    return [f"--config-file={config_file}"]

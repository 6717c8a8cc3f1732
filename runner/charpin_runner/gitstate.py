"""Read a work tree's git state without trusting `.git/`. Runs on boxes; stdlib only.

Imports only charpin_runner.errors and charpin_runner.fixtures.

The parent process calls this before and after the test command, and the test may have written
anything under `.git/`. So git never looks at the work tree with the repository's own settings:
those commands run against a private git directory in a temporary folder (HEAD as a commit id,
a config file of our own, the repository's object store) with a private index built from HEAD's
tree, with system and global config switched off. Nothing the repository configures is read
there (includes, filters, fsmonitor, hooks, core.worktree, sparse checkout, attributes and
excludes files), index flags such as skip-worktree are not in that index, and every tracked file
is compared with HEAD by content. Untracked files are listed with the ignore rules that were in
force before the run, rewritten into one excludes file, so a rule the run adds hides nothing.
What the run changed in `.git/` (config keys, info/exclude, hooks, index flags) is reported.
Commands that read the real git directory (rev-parse of HEAD, config --list) read files, never
objects (a partial clone's lazy fetch would run a command the config names) and run nothing.
After the run, HEAD's tree is taken from the index built before it, not from the object store
the run could have rewritten (git does not check the ids of the trees read-tree reads).
Every git call has a deadline: a FIFO or a hung file under `.git/` makes the measurement fail
(RunError), never hang. Git is started through charpin_runner.gitcmd, so no GIT_* variable of
the caller steers it.

Imports only charpin_runner.errors, charpin_runner.fixtures and charpin_runner.gitcmd.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from charpin_runner import gitcmd, gitfindings, gitwatch
from charpin_runner.errors import RunError, UsageError
from charpin_runner.fixtures import printable
from charpin_runner.gitfindings import run_findings, setup_notes, written_paths
from charpin_runner.gitrules import (
    content_keys,
    flatten_ignore,
    parse_porcelain,
    read_rules,
    untracked_attributes,
)
from charpin_runner.gitrules import (
    text as path_text,
)

__all__ = [
    "MEASURE_SECONDS",
    "UNRESOLVED",
    "GitState",
    "find_toplevel",
    "flatten_ignore",
    "parse_porcelain",
    "read_state",
    "run_findings",
    "setup_notes",
    "unreadable",
    "written_paths",
]
# Our own output folder is never part of the state we measure.
_OWN_PREFIX = ".charpin/"
UNRESOLVED = "unresolved"
# Seconds one measurement may take before it is a RunError.
MEASURE_SECONDS = 900.0
# Dirty submodule work trees are not entered: their own config is out of our reach.
_NO_SUBMODULES = "--ignore-submodules=dirty"




@dataclass(frozen=True)
class GitState:
    """HEAD, its tree, the dirty paths and a content key per dirty path, plus what steers git.

    dirty and contents compare the work tree with HEAD's tree by content; the other fields are
    evidence about the repository itself, compared between two states by run_findings.
    """

    head: str
    tree: str
    dirty: list[str]
    digest: str
    contents: dict[str, str]
    # Paths the repository's own index marks skip-worktree or assume-unchanged.
    flagged: list[str] = field(default_factory=list)
    # Repository config keys (lower-case) that change what git looks at or run code.
    risky: list[str] = field(default_factory=list)
    # Every repository config entry as `key NUL value`, to name the keys a run changed.
    config: tuple[str, ...] = ()
    # Files that steer git (config, info/exclude, hooks, ...): label -> content key.
    controls: dict[str, str] = field(default_factory=dict)
    # Oddities found while measuring (one sentence each).
    findings: list[str] = field(default_factory=list)
    # Every file under the git directory: label -> stat key (gitwatch.py).
    gitdir: dict[str, str] = field(default_factory=dict, repr=False)
    # The ignore rules in force, as one top-level excludes file; reused after the run.
    excludes: bytes = field(default=b"", repr=False)
    # HEAD's tree as an index (read-tree, no stat data); reused after the run while HEAD holds.
    index: bytes = field(default=b"", repr=False)
    git_dir: str = ""


def find_toplevel(folder: Path) -> Path:
    """Return the work tree root containing folder; UsageError when it is not in a git repo.

    Found by walking up to the `.git` that git itself discovers, never from core.worktree: a
    test can set that to another folder, and every later receipt would measure the wrong tree.
    """
    deadline = time.monotonic() + MEASURE_SECONDS

    def ask(where: Path) -> subprocess.CompletedProcess[bytes]:
        return _discover(where, deadline)

    first = ask(folder)
    git_dir = _git_dir(first)
    if git_dir is not None:
        start = Path(os.path.realpath(folder))
        for candidate in (start, *start.parents):
            if os.path.lexists(candidate / ".git") and _git_dir(ask(candidate)) == git_dir:
                return candidate
    refused = gitcmd.refusal(first.stderr, folder)
    if refused is not None:
        # git found a repository but will not open it: say so, with git's own fix.
        raise UsageError(refused)
    raise UsageError(
        f"{folder} is not inside a git repository; run from a repository or pass --repo DIR"
    )


def read_state(repo: Path, before: GitState | None = None) -> GitState:
    """Measure the git state of repo now. A HEAD that cannot be resolved reads `unresolved`.

    With before (the state measured before the run), untracked files are listed with the
    ignore rules in force then, so rules the run added or changed hide nothing.
    """
    deadline = time.monotonic() + MEASURE_SECONDS
    found = _discover(repo, deadline)
    git_dir = _git_dir(found)
    if git_dir is None:
        raise RunError(
            f"git rev-parse failed in {repo}: {_last_line(found.stderr)}; "
            "check the repository is readable"
        )
    with tempfile.TemporaryDirectory(prefix="charpin-git-") as tmp:
        return _Measure(repo, Path(git_dir), Path(tmp), deadline).state(before)


def unreadable() -> GitState:
    """The state recorded when git cannot read the repository any more (e.g. a broken HEAD)."""
    return GitState(head=UNRESOLVED, tree=UNRESOLVED, dirty=[], digest=UNRESOLVED, contents={})


_EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()


class _Measure:
    """One measurement: the real git directory read as data, the work tree through a private
    git directory under tmp."""

    def __init__(self, repo: Path, git_dir: Path, tmp: Path, deadline: float) -> None:
        self.repo = repo
        self.git_dir = git_dir
        self.deadline = deadline
        self.common = self._common_dir()
        self.shadow = tmp / "git"
        self.tmp = tmp

    def state(self, before: GitState | None) -> GitState:
        head = self._head()
        self._build_shadow(head)
        tree = self._tree(head)
        config = self._config()
        global_path = self._global_excludes()
        controls = self._controls(global_path)
        gitdir = gitwatch.snapshot([self.git_dir, self.common], self._label)
        findings: list[str] = []
        same = before is not None and (before.head, before.tree) == (head, tree)
        index = self._fill_index(tree, before.index if before and same else b"")
        tracked = self._ls(["--cached"], self.temp_index)
        status = self._tracked_changes()
        if before is not None:
            excludes = before.excludes
        else:
            global_rules = read_rules(global_path, follow=True) if global_path else None
            info_exclude = read_rules(str(self.common / "info" / "exclude"), follow=True)
            base = (global_rules or b"") + b"\n" + (info_exclude or b"") + b"\n"
            excludes = self._excludes(base, tracked, findings)
        for path in self._untracked(excludes):
            status.setdefault(path, "?")
        for path in untracked_attributes(self.repo, tracked):
            status.setdefault(path, "?")
        # Escaped first, then sorted: the receipt's path sets are sorted and free of repeats.
        named = sorted((path_text(p), p) for p in status if not p.startswith(_OWN_PREFIX))
        paths = [path for _, path in named]
        digests = dict(zip(paths, content_keys(self.repo, paths)))
        untracked = [(p, digests[p]) for p in paths if status[p] == "?"]
        return GitState(
            head=head,
            tree=tree,
            dirty=[text for text, _ in named],
            digest=self._digest(untracked) if paths else _EMPTY_DIGEST,
            contents={text: f"{status[p]}:{digests[p]}" for text, p in named},
            flagged=self._flagged(findings),
            risky=gitfindings.risky(config),
            config=config,
            controls=controls,
            findings=findings,
            gitdir=gitdir,
            excludes=excludes,
            index=index,
            git_dir=str(self.git_dir),
        )

    # --- the real git directory, read as data -------------------------------------------

    def _real(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        """git on the real git directory: only for commands that read refs and config."""
        return self._run(["--git-dir", str(self.git_dir), *args], None, check)

    def _common_dir(self) -> Path:
        out = self._real("rev-parse", "--git-common-dir").stdout.rstrip(b"\n")
        common = Path(os.fsdecode(out))
        return common if common.is_absolute() else self.git_dir / common

    def _head(self) -> str:
        """HEAD's commit id from the refs alone; `unresolved` on a branch with no commit yet."""
        result = self._real("rev-parse", "--verify", "-q", "HEAD", check=False)
        text = result.stdout.decode("ascii", "replace").strip()
        if result.returncode == 0 and text:
            return text
        if self._real("symbolic-ref", "-q", "HEAD", check=False).returncode != 0:
            raise RunError(
                f"git cannot resolve HEAD in {self.repo}; check the repository is readable"
            )
        return UNRESOLVED

    def _tree(self, head: str) -> str:
        """HEAD's tree id, read through the private git directory (objects, never its config)."""
        if head == UNRESOLVED:
            return UNRESOLVED
        result = self._shadow(
            ["rev-parse", "--verify", "-q", "HEAD^{tree}"], self.temp_index, check=False
        )
        text = result.stdout.decode("ascii", "replace").strip()
        if result.returncode != 0 or not text:
            raise RunError(
                f"git cannot resolve HEAD in {self.repo}; check the repository is readable"
            )
        return text

    def _config(self) -> tuple[str, ...]:
        """The repository's own config entries, includes followed (listing runs nothing)."""
        # No -c options here: they would be listed as if they were the repository's.
        listed = gitcmd.run(
            ["--git-dir", str(self.git_dir), "config", "--list", "--includes", "-z"],
            hardened=False,
            timeout=self._left(),
        )
        entries = []
        for item in listed.stdout.split(b"\0"):
            if item:
                key, _, value = os.fsdecode(item).partition("\n")
                entries.append(f"{key}\0{value}")
        return tuple(entries)

    def _controls(self, global_path: str | None) -> dict[str, str]:
        places = {"common": self.common, "own": self.git_dir}
        files = {
            self._label(places[where] / name): places[where] / name
            for where, name in gitfindings.CONTROL_FILES
        }
        hooks = self.common / "hooks"
        if hooks.is_dir() and not hooks.is_symlink():
            for entry in sorted(os.listdir(hooks)):
                files[self._label(hooks / entry)] = hooks / entry
        else:
            files[self._label(hooks)] = hooks
        if global_path:
            files["the global excludes file (core.excludesFile)"] = Path(global_path)
        labels = sorted(files)
        keys = content_keys(self.repo, [str(files[label]) for label in labels])
        return dict(zip(labels, keys))

    def _label(self, path: Path) -> str:
        try:
            own = Path(os.path.realpath(self.repo)) / ".git"
            return ".git/" + path.relative_to(own).as_posix()
        except ValueError:
            return printable(str(path))

    def _global_excludes(self) -> str | None:
        """The user's global excludes file, as their own git would find it (reading runs
        nothing); asked through the private git directory, so the repository's config is not
        consulted. Kept on purpose: without it, files the user ignores everywhere would look
        untracked. Its bytes before the run are what count afterwards too."""
        result = gitcmd.run(
            ["--git-dir", str(self.shadow), "config", "--path", "--get", "core.excludesFile"],
            env=gitcmd.USER,
            hardened=False,
            timeout=self._left(),
        )
        value = os.fsdecode(result.stdout.rstrip(b"\n"))
        if result.returncode == 0 and value:
            return value
        xdg = os.environ.get("XDG_CONFIG_HOME")
        if xdg:
            return os.path.join(xdg, "git", "ignore")
        home = os.environ.get("HOME")
        return os.path.join(home, ".config", "git", "ignore") if home else None

    def _flagged(self, findings: list[str]) -> list[str]:
        """Paths the real index marks skip-worktree (S) or assume-unchanged (lower case)."""
        index = self.git_dir / "index"
        try:
            mode = os.lstat(index).st_mode
        except OSError:
            return []
        if not stat.S_ISREG(mode):
            findings.append("the repository's index is not a regular file; its flags are unread")
            return []
        # A split index keeps most entries in a shared file beside it.
        for name in os.listdir(self.git_dir):
            if name.startswith("sharedindex."):
                link = self.shadow / name
                if not os.path.lexists(link):
                    os.symlink(self.git_dir / name, link)
        out = self._shadow(["ls-files", "-v", "-z"], str(index), check=False).stdout
        flagged = []
        for record in out.split(b"\0"):
            tag, _, path = record.partition(b" ")
            if path and (tag == b"S" or tag.islower()):
                flagged.append(path_text(os.fsdecode(path)))
        return sorted(flagged)

    # --- the work tree, through the private git directory --------------------------------

    @property
    def temp_index(self) -> str:
        return str(self.tmp / "index")

    def _build_shadow(self, head: str) -> None:
        (self.shadow / "refs").mkdir(parents=True)
        (self.shadow / "info").mkdir()
        fmt = self._real("rev-parse", "--show-object-format", check=False).stdout.strip()
        lines = ["[core]", "\tbare = false"]
        if fmt and fmt != b"sha1":
            lines = ["[core]", "\trepositoryformatversion = 1", "\tbare = false"]
            lines += ["[extensions]", f"\tobjectFormat = {fmt.decode('ascii', 'replace')}"]
        (self.shadow / "config").write_text("\n".join(lines) + "\n", encoding="utf-8")
        # Detached at the commit we resolved: the private directory has no refs to follow.
        (self.shadow / "HEAD").write_text(
            (head if head != UNRESOLVED else "ref: refs/heads/unborn") + "\n", encoding="utf-8"
        )

    def _fill_index(self, tree: str, trusted: bytes) -> bytes:
        """The private index: HEAD's tree (trusted, the index measured before the run, or
        read-tree), then every tracked file hashed once, so the commands below compare content,
        not stat. Returns the index as read-tree wrote it, before any stat data."""
        if tree == UNRESOLVED:
            return b""
        index = Path(self.temp_index)
        if trusted:
            index.write_bytes(trusted)
        else:
            self._shadow(["read-tree", tree], self.temp_index)
            trusted = index.read_bytes()
        self._shadow(["update-index", "-q", "--refresh"], self.temp_index, check=False)
        return trusted

    def _shadow(
        self, args: Sequence[str], index: str, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        front = ["--git-dir", str(self.shadow), "--work-tree", str(self.repo)]
        return self._run([*front, *args], index, check)

    def _run(
        self, args: Sequence[str], index: Optional[str], check: bool
    ) -> subprocess.CompletedProcess[bytes]:
        """Hardened, sealed git; with index, on that index and the repository's objects."""
        objects = str(self.common / "objects") if index is not None else None
        result = gitcmd.run(args, index_file=index, object_dir=objects, timeout=self._left())
        if check and result.returncode != 0:
            verb = next((a for a in args if not a.startswith("-") and "/" not in a), "")
            raise RunError(
                f"git {verb} failed in {self.repo}: {_last_line(result.stderr)}; "
                "check the repository is readable"
            )
        return result

    def _left(self) -> float:
        return _left(self.deadline)

    def _ls(self, args: Sequence[str], index: str, *pathspec: str) -> list[str]:
        out = self._shadow(["ls-files", "-z", *args, "--", *pathspec], index).stdout
        return [os.fsdecode(p) for p in out.split(b"\0") if p]

    def _tracked_changes(self) -> dict[str, str]:
        raw = self._shadow(
            ["status", "--porcelain=v2", "-z", "--untracked-files=no", _NO_SUBMODULES],
            self.temp_index,
        ).stdout
        status: dict[str, str] = {}
        for code, path in parse_porcelain(raw):
            status.setdefault(path, code)
        return status

    def _excludes(self, base: bytes, tracked: Sequence[str], findings: list[str]) -> bytes:
        """The ignore rules in force now as one excludes file: the global file, info/exclude,
        then every `.gitignore` git reads, parents before children, then our own folder."""
        base_file = self.tmp / "base-excludes"
        base_file.write_bytes(base)
        options = ["--others", f"--exclude-from={base_file}", "--exclude-per-directory=.gitignore"]
        spec = ":(glob)**/.gitignore"
        found = {p for p in tracked if p == ".gitignore" or p.endswith("/.gitignore")}
        found.update(self._ls(options, self.temp_index, spec))
        ignored = self._ls([*options, "--ignored", "--directory"], self.temp_index, spec)
        found.update(p for p in ignored if not p.endswith("/"))
        lines = [base]
        for path in sorted(found, key=lambda p: (p.count("/"), p)):
            folder = path[: -len(".gitignore")].rstrip("/")
            text = read_rules(str(self.repo / path), follow=False)
            if text is None:
                continue
            if "\n" in folder or "\r" in folder:
                findings.append(f"the rules of {path_text(path)} were not applied (odd name)")
                continue
            lines.extend(flatten_ignore(folder, text))
        lines.append(b"/.charpin/")
        return b"\n".join(lines) + b"\n"

    def _untracked(self, excludes: bytes) -> list[str]:
        rules = self.tmp / "excludes"
        rules.write_bytes(excludes)
        return self._ls(["--others", f"--exclude-from={rules}"], self.temp_index)

    def _digest(self, untracked: Sequence[tuple[str, str]]) -> str:
        """sha256 over `git diff --binary` (the private index holds HEAD's tree), then
        `path NUL sha256 NUL` per untracked file."""
        digest = hashlib.sha256()
        diff = self._shadow(
            [
                "diff",
                "--binary",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                _NO_SUBMODULES,
                "--",
                ".",
                ":(exclude).charpin",
            ],
            self.temp_index,
            check=False,
        )
        digest.update(diff.stdout)
        for path, content in untracked:
            digest.update(os.fsencode(path) + b"\0" + content.encode("ascii") + b"\0")
        return digest.hexdigest()


_DISCOVER = ("rev-parse", "--absolute-git-dir")


def _discover(where: Path, deadline: float) -> subprocess.CompletedProcess[bytes]:
    """Ask git, as the user's own git would, which git directory holds where (no -c: a
    repository the user trusts through safe.directory must open as it does for them)."""
    return gitcmd.run(
        [*_DISCOVER], cwd=where, env=gitcmd.USER, hardened=False, timeout=_left(deadline)
    )


def _git_dir(result: subprocess.CompletedProcess[bytes]) -> str | None:
    """The absolute git directory from `rev-parse --absolute-git-dir`, or None when it failed."""
    text = result.stdout.rstrip(b"\n")
    if result.returncode != 0 or not text:
        return None
    return os.path.realpath(os.fsdecode(text))


def _last_line(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else "no message"


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)

"""Coordinator side; imports only the stdlib, charpin_runner.errors and charpin_coordinator.gitcmd.

An agent's patch becomes a commit in the user's repository without touching its working tree,
index, HEAD or refs: a format-patch series is split as `git am` splits it (mailsplit, mailinfo),
the base tree is read into a private index (GIT_INDEX_FILE in a temporary folder), every patch
is applied to that index with `git apply --cached` in order, and write-tree and commit-tree make
an unreferenced commit whose parent is the base. git runs with GIT_DIR and GIT_WORK_TREE naming
the repository's git folder and an empty temporary folder, so a `repo` inside a subfolder, a
core.worktree setting or the user's own files can neither narrow nor feed the patch.

The commits are deterministic: a fixed identity, the base's committer date and a message naming
the patch's sha256, so the same patch on the same base is the same commit (and cached as such).

Path names are git's bytes read with -z and decoded with os.fsdecode (surrogateescape): a name
with a newline, a quote or bytes that are not UTF-8 stays one path, and hands back to git's argv
byte for byte. Messages show such names escaped, so an error stays one line.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from charpin_runner.errors import RunError, UsageError

from charpin_coordinator.gitcmd import git_run

# Config that would change what git applies or commits, or run a program meanwhile. The user's
# apply.whitespace=fix would rewrite the agent's lines, commit.gpgSign would prompt for a key.
_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.splitIndex=false",
    "core.untrackedCache=false",
    "apply.whitespace=nowarn",
    "apply.ignoreWhitespace=no",
    "commit.gpgSign=false",
    "i18n.commitEncoding=UTF-8",
)
_NAME = "charpin verify"
_EMAIL = "verify@charpin.invalid"
# A format-patch --base trailer (sha-1 or sha-256 repositories).
_BASE_COMMIT = re.compile(rb"^base-commit: ([0-9a-f]{40}|[0-9a-f]{64})[ \t\r]*$", re.M)
# The mbox separator line format-patch writes; mailsplit is what decides where mails end.
_MBOX = re.compile(rb"\AFrom \S+ ")
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# git apply: `error: patch failed: NAME:LINE`. NAME is raw and may hold a newline, hence re.S.
_FAILED = re.compile(rb"^error: patch failed: (.*?):(\d+)$", re.M | re.S)
_ESCAPES = {
    ord(k): v for k, v in {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13}.items()
}
_FIX = "rebase it onto --base or pass the right --base"


@dataclass(frozen=True)
class Patched:
    base: str  # base commit sha
    patched: str  # commit sha of base + patch (parent: base), made with commit-tree, unreferenced
    # The patch as given (for --patched REV: `git diff --binary --full-index base patched`).
    patch: bytes
    patch_sha256: str  # sha256 hex of `patch`
    # Every path the patch touches, sorted: both sides of a rename, deletions, mode changes.
    changed: tuple[str, ...]


def from_patch(repo: Path, data: bytes, base_rev: str | None) -> Patched:
    """base + the patch (a diff, a binary diff or a format-patch series) as a new commit.
    base_rev: None takes a format-patch's base-commit trailer, else HEAD."""
    git_dir = _git_dir(repo)
    if not data.strip():
        raise UsageError("the patch is empty; pass the output of git diff or git format-patch")
    if base_rev is not None:
        base = _resolve(repo, base_rev, f"--base {_shown(base_rev)} is not a commit in {repo}")
    elif trailer := _BASE_COMMIT.search(data):
        sha = trailer.group(1).decode("ascii")
        # The base decides the configuration, the tests and what is protected, and the patch is
        # untrusted: it names the base only when that is HEAD. An older commit (without the
        # test that catches it, say) is the reviewer's to choose, with --base.
        head = _resolve(repo, "HEAD", f"{repo} has no commit at HEAD; pass --base")
        if not head.startswith(sha) and sha != head:
            raise UsageError(
                f"the patch names base-commit {sha[:12]}, which is not HEAD ({head[:12]}); "
                f"verify judges against a base you choose: pass --base {sha[:12]} if you trust "
                "it, or rebase the patch onto HEAD"
            )
        base = head
    else:
        base = _resolve(repo, "HEAD", f"{repo} has no commit at HEAD; commit first or pass --base")
    digest = hashlib.sha256(data).hexdigest()
    with tempfile.TemporaryDirectory(prefix="charpin-verify-") as folder:
        scratch = _Scratch(git_dir, Path(folder))
        scratch.run("read-tree", base, what="read-tree")
        parts = scratch.split(data)
        for number, part in enumerate(parts, 1):
            scratch.apply(
                part, base, f"commit {number} of {len(parts)}: " if len(parts) > 1 else ""
            )
        tree = scratch.run("write-tree", what="write-tree").decode("ascii").strip()
    if tree == _tree(repo, base):
        raise UsageError(
            f"the patch changes nothing in {base[:12]}; pass the agent's actual diff or the "
            "right --base"
        )
    commit = _commit_tree(repo, tree, base, f"charpin verify: patch {digest[:12]}")
    return Patched(
        base, commit, data, digest, tuple(sorted({p for p, _, _ in _diff(repo, base, commit)}))
    )


def from_rev(repo: Path, patched_rev: str, base_rev: str | None) -> Patched:
    """The agent's own commit against base (HEAD unless given); the patch is their diff."""
    _git_dir(repo)
    base_rev = "HEAD" if base_rev is None else base_rev
    base = _resolve(repo, base_rev, f"--base {_shown(base_rev)} is not a commit in {repo}")
    patched = _resolve(
        repo,
        patched_rev,
        f"--patched {_shown(patched_rev)} is not a commit in {repo}; fetch the agent's "
        "branch first",
    )
    # Every flag that user config could turn the other way (prefixes, colour, external diff,
    # submodules hidden, a relative diff) is given, so the evidence is a patch `git apply` takes.
    data = _ok(
        _git(
            repo,
            "diff",
            "--binary",
            "--full-index",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-relative",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            "--ignore-submodules=none",
            "--submodule=short",
            "-M",
            base,
            patched,
        ),
        "diff",
    )
    if not data:
        raise UsageError(
            f"--patched {_shown(patched_rev)} does not differ from the base {base[:12]}; pass the "
            "agent's commit or the right --base"
        )
    changed = tuple(sorted({p for p, _, _ in _diff(repo, base, patched)}))
    return Patched(base, patched, data, hashlib.sha256(data).hexdigest(), changed)


def restore_from_base(repo: Path, patched: Patched, paths: Sequence[str]) -> str:
    """A commit (parent: base) of patched's tree with every path in paths (a file, or a folder
    and all under it) exactly as in base; patched.patched itself when that changes nothing."""
    git_dir = _git_dir(repo)
    prefixes = [p.strip("/") for p in paths if p.strip("/")]
    zero = "0" * len(patched.base)
    records = []
    for path, mode, sha in _diff(repo, patched.base, patched.patched):
        if any(path == p or path.startswith(p + "/") for p in prefixes):
            # Mode 000000: not in base, so the entry goes; otherwise base's entry comes back.
            records.append(
                (mode == "000000", f"{mode} {sha}" if mode != "000000" else f"0 {zero}", path)
            )
    if not records:
        return patched.patched
    # Removals first: a path that was a file in base and a folder in patched (or the reverse)
    # must be gone before its other shape is added, or the index refuses the pair.
    records.sort(key=lambda r: not r[0])
    stream = b"".join(
        f"{entry}\t".encode("ascii") + os.fsencode(path) + b"\0" for _, entry, path in records
    )
    with tempfile.TemporaryDirectory(prefix="charpin-verify-") as folder:
        scratch = _Scratch(git_dir, Path(folder))
        scratch.run("read-tree", patched.patched, what="read-tree")
        scratch.run("update-index", "-z", "--index-info", input=stream, what="update-index")
        tree = scratch.run("write-tree", what="write-tree").decode("ascii").strip()
    if tree == _tree(repo, patched.patched):
        return patched.patched
    message = f"charpin verify: patch {patched.patch_sha256[:12]}, protected paths as in base"
    return _commit_tree(repo, tree, patched.base, message)


class _Scratch:
    """A private index and an empty work tree in a temporary folder, on the user's git folder."""

    def __init__(self, git_dir: str, folder: Path) -> None:
        self.folder = folder
        self.work = folder / "work"
        self.work.mkdir()
        self.env = {
            "GIT_DIR": git_dir,
            "GIT_WORK_TREE": str(self.work),
            "GIT_INDEX_FILE": str(folder / "index"),
        }

    def git(self, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return _git(self.work, *args, input=input, env=self.env)

    def run(self, *args: str, what: str, input: bytes | None = None) -> bytes:
        return _ok(self.git(*args, input=input), what)

    def split(self, data: bytes) -> list[bytes]:
        """The patches in data, in order: one for a diff, one per mail of a format-patch series
        (the cover letter and empty commits have none)."""
        if not _MBOX.match(data):
            return [data]
        mails = self.folder / "mails"
        mails.mkdir()
        # --keep-cr: a CRLF file's lines end in \r\n inside the patch, and must stay so.
        self.run("mailsplit", "--keep-cr", f"-o{mails}", input=data, what="mailsplit")
        patches = []
        for mail in sorted(mails.iterdir()):
            message, body = self.folder / "message", self.folder / "body"
            self.run(
                "mailinfo",
                "--no-scissors",
                "--quoted-cr=nowarn",
                str(message),
                str(body),
                input=mail.read_bytes(),
                what="mailinfo",
            )
            if body.read_bytes().strip():
                patches.append(body.read_bytes())
        if not patches:
            raise UsageError(
                "the patch has no diff in it; pass the output of git diff or git format-patch"
            )
        return patches

    def apply(self, patch: bytes, base: str, which: str) -> None:
        """Apply patch to the private index, or raise the one-line reason it does not apply."""
        done = self.git("apply", "--cached", "--binary", "--whitespace=nowarn", input=patch)
        if done.returncode == 0:
            return
        # Parsing alone (no index) tells a patch that is not one from one that does not fit.
        parsed = self.git("apply", "--numstat", input=patch)
        if parsed.returncode != 0:
            reason = _first_error(parsed.stderr)
            if b"No valid patches in input" in reason:
                raise UsageError(
                    f"the patch has no diff in it{f' ({which[:-2]})' if which else ''}; pass the "
                    "output of git diff or git format-patch"
                )
            raise UsageError(
                f"the patch cannot be read: {which}{_shown(reason)}; pass git diff or git "
                "format-patch output unchanged"
            )
        failed = _FAILED.search(done.stderr)
        if failed:
            name, line = failed.group(1), int(failed.group(2))
            hunk = _hunk_number(patch, name, line)
            where = f"{_shown(name)}: patch failed at line {line}"
            where += f" (hunk {hunk})" if hunk else ""
        else:
            where = _shown(_first_error(done.stderr))
        raise UsageError(f"the patch does not apply to {base[:12]}: {which}{where}; {_FIX}")


def _git(
    where: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    pairs = [item for setting in _CONFIG for item in ("-c", setting)]
    try:
        # stdin is always given: git apply and mailinfo would otherwise read the user's terminal.
        return git_run(where, *pairs, *args, input=input or b"", env=env)
    except subprocess.TimeoutExpired as exc:
        raise RunError(
            f"git {args[0]} did not finish within {exc.timeout:.0f} s in {where}; check the "
            "repository (a hung mount, a huge patch)"
        ) from exc
    except OSError as exc:
        raise RunError(f"cannot run git ({exc}); install git") from exc


def _ok(done: subprocess.CompletedProcess[bytes], what: str) -> bytes:
    if done.returncode != 0:
        raise RunError(
            f"git {what} failed: {_shown(_first_error(done.stderr))}; check the repository "
            "with git fsck"
        )
    return done.stdout


def _git_dir(repo: Path) -> str:
    done = _git(repo, "rev-parse", "--absolute-git-dir")
    if done.returncode != 0:
        raise UsageError(f"{repo} is not a git repository; run verify inside one")
    return os.fsdecode(done.stdout.rstrip(b"\n"))


def _resolve(repo: Path, rev: str, problem: str) -> str:
    """The commit sha rev names, or UsageError(problem + a fix when problem has none)."""
    if not problem.count(";"):
        problem += "; pass a branch, tag or commit sha that exists there"
    # A leading dash would be read as an option, whatever follows it.
    if not rev or rev.startswith("-"):
        raise UsageError(problem)
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0:
        raise UsageError(problem)
    return done.stdout.decode("ascii").strip()


def _tree(repo: Path, commit: str) -> str:
    return _ok(_git(repo, "rev-parse", f"{commit}^{{tree}}"), "rev-parse").decode("ascii").strip()


def _commit_tree(repo: Path, tree: str, parent: str, message: str) -> str:
    # The base's committer date, so a commit never predates its parent and stays reproducible.
    raw = _ok(_git(repo, "cat-file", "commit", parent), "cat-file")
    stamp = next(
        (
            line.rsplit(b" ", 2)
            for line in raw.split(b"\n\n", 1)[0].split(b"\n")
            if line.startswith(b"committer ")
        ),
        [b"", b"1000000000", b"+0000"],
    )
    when = f"@{stamp[1].decode('ascii')} {stamp[2].decode('ascii')}"
    env = {
        "GIT_AUTHOR_NAME": _NAME,
        "GIT_AUTHOR_EMAIL": _EMAIL,
        "GIT_AUTHOR_DATE": when,
        "GIT_COMMITTER_NAME": _NAME,
        "GIT_COMMITTER_EMAIL": _EMAIL,
        "GIT_COMMITTER_DATE": when,
    }
    done = _git(
        repo,
        "commit-tree",
        "--no-gpg-sign",
        "-p",
        parent,
        tree,
        input=f"{message}\n".encode(),
        env=env,
    )
    return _ok(done, "commit-tree").decode("ascii").strip()


def _diff(repo: Path, base: str, patched: str) -> list[tuple[str, str, str]]:
    """Every path that differs between the two commits, with its mode and blob in base (mode
    000000 when base has none). --no-renames: a rename is its old path deleted and its new one
    added, so both sides are listed."""
    out = _ok(
        _git(repo, "diff-tree", "-r", "-z", "--no-renames", "--no-abbrev", base, patched),
        "diff-tree",
    )
    fields = out.split(b"\0")
    found = []
    for header, path in zip(fields[0::2], fields[1::2], strict=False):
        # ":<old mode> <new mode> <old sha> <new sha> <status>"
        old_mode, _, old_sha = header.lstrip(b":").split(b" ")[:3]
        found.append((os.fsdecode(path), old_mode.decode("ascii"), old_sha.decode("ascii")))
    return found


def _first_error(stderr: bytes) -> bytes:
    lines = [line for line in stderr.split(b"\n") if line.strip()]
    for line in lines:
        for prefix in (b"error: ", b"fatal: "):
            if line.startswith(prefix):
                return line[len(prefix) :]
    return lines[0] if lines else b"no reason given"


def _shown(text: bytes | str) -> str:
    """text on one printable line: control characters and undecodable bytes escaped."""
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    out = []
    for ch in text:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ascii(ch)[1:-1])
    return "".join(out)


def _hunk_number(patch: bytes, name: bytes, line: int) -> int | None:
    """Which hunk (from 1) of name's section in patch starts at old line `line`: git apply names
    only the line. Hunk bodies are skipped by their counts, so a deleted line reading `-- x`
    (`--- x` in the patch) is not taken for a file header."""
    names: set[bytes] = set()
    hunks = old = new = 0
    for raw in patch.split(b"\n"):
        if old > 0 or new > 0:
            tag = raw[:1]
            if tag == b"-":
                old -= 1
            elif tag == b"+":
                new -= 1
            elif tag in (b" ", b""):
                old, new = old - 1, new - 1
            elif tag != b"\\":
                old = new = 0
            continue
        if raw.startswith(b"diff "):
            names, hunks = set(), 0
        elif raw.startswith((b"--- ", b"+++ ")):
            if hunks:  # a plain diff's next file has no `diff` line
                names, hunks = set(), 0
            value = _path_value(raw[4:], header=True)
            if value is not None:
                names.add(value)
        elif raw.startswith((b"rename from ", b"rename to ", b"copy from ", b"copy to ")):
            value = _path_value(raw.split(b" ", 2)[2], header=False)
            if value is not None:
                names.add(value)
        elif found := _HUNK.match(raw):
            hunks += 1
            old = int(found.group(2)) if found.group(2) is not None else 1
            new = int(found.group(4)) if found.group(4) is not None else 1
            if name in names and int(found.group(1)) == line:
                return hunks
    return None


def _path_value(value: bytes, header: bool) -> bytes | None:
    """A path as a patch spells it: C-quoted or raw; `---`/`+++` lines carry a/ b/ prefixes
    (stripped, as -p1 does) and, after a tab, a timestamp or nothing (git adds a tab after names
    with spaces)."""
    if value.startswith(b'"'):
        value = _unquote(value)
    elif header:
        value = value.split(b"\t", 1)[0]
    if not header:
        return value
    if value == b"/dev/null":
        return None
    return value.split(b"/", 1)[1] if b"/" in value else value


def _unquote(value: bytes) -> bytes:
    """git's C-style quoting undone: \\t, \\n, \\", \\\\ and octal bytes."""
    out = bytearray()
    i = 1
    while i < len(value) and value[i] != ord('"'):
        if value[i] == ord("\\") and i + 1 < len(value):
            following = value[i + 1]
            if ord("0") <= following <= ord("7"):
                out.append(int(value[i + 1 : i + 4], 8) & 0xFF)
                i += 4
                continue
            out.append(_ESCAPES.get(following, following))
            i += 2
            continue
        out.append(value[i])
        i += 1
    return bytes(out)


__all__ = ["Patched", "from_patch", "from_rev", "restore_from_base"]

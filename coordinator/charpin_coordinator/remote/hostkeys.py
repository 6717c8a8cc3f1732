"""Coordinator side; may import paramiko (keys, SSHClient hooks), never fabric; opens no sockets.

Host-key trust for SSH boxes. known_hosts files are parsed here line by line, as sshd(8)
"SSH_KNOWN_HOSTS FILE FORMAT" describes them (markers, hashed `|1|` names, `[host]:port`, comma
lists, `*`/`?` wildcards, `!` negations), not by paramiko's HostKeys, which raises InvalidHostKey
on marker lines and knows neither wildcards nor @revoked (nor HostKeyEntry.from_line, which splits
at every single space and drops key types paramiko cannot load, ssh-dss since paramiko 4: such a
line must still make a different key "CHANGED", not "unknown"). Hashed names are checked with
paramiko's HostKeys.hash_host. paramiko is given no keys at all, so it
hands every server key to HostKeyVerifier after the key exchange and before authentication:
- a key on an @revoked line (for any host) is refused, whatever other lines say;
- @cert-authority lines are skipped with a note (host certificates are not supported);
- a line that does not parse is skipped with a note naming file:line;
- otherwise the key must be on a line matching the endpoint; --accept-new appends unknown keys.
Notes are logged once per process as warnings (logger `charpin_coordinator.remote.hostkeys`) and
kept on the verifier for the caller. No coordinator CLI configures logging, so each reaches the
user as one bare `charpin-remote: note: ...` line on stderr through logging's last-resort handler
(tests/hostile/test_known_hosts.py pins this through the CLI).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import shlex
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import paramiko

from charpin_coordinator.remote.hosts import HostSpec

log = logging.getLogger(__name__)

HASH_MAGIC: Final = "|1|"
REVOKED: Final = "@revoked"
CERT_AUTHORITY: Final = "@cert-authority"
# One RSA key serves three signature algorithms; paramiko offers them as separate key types.
_ALGORITHMS: Final = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")}

_FIELD_SEPARATORS: Final = re.compile(r"[ \t]+")

_noted: set[str] = set()
_noted_lock = threading.Lock()


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint of a public key (SHA256:base64, no padding)."""
    return str(key.fingerprint)


def blob_fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob as known_hosts stores it."""
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode()
    return f"SHA256:{digest.rstrip('=')}"


class MalformedLineError(ValueError):
    """One known_hosts line that does not parse; the message says what is wrong with it."""


@dataclass(frozen=True)
class KnownHostLine:
    """One usable known_hosts line: a plain one, or an @revoked one (marker == REVOKED)."""

    path: str
    lineno: int
    marker: str
    patterns: tuple[str, ...]  # plain patterns, possibly `!`-negated, as written
    hashed: tuple[str, ...]  # each `|1|salt|hash` name, base64 re-encoded canonically
    keytype: str
    blob: bytes

    @property
    def where(self) -> str:
        """file:line, for messages."""
        return f"{self.path}:{self.lineno}"

    @property
    def fingerprint(self) -> str:
        """The SHA256 fingerprint of this line's key."""
        return blob_fingerprint(self.blob)

    def matches(self, name: str) -> bool:
        """Whether the line's host field names `name` (a host, or `[host]:port`)."""
        lowered = name.lower()
        positive = False
        for pattern in self.patterns:
            negated = pattern.startswith("!")
            if _wildcard((pattern[1:] if negated else pattern).lower(), lowered):
                if negated:  # sshd(8): a matching negation rejects the line for this host
                    return False
                positive = True
        if positive:
            return True
        # ssh hashes the name lower-cased; the name as written is also tried, as paramiko did
        return any(
            hmac.compare_digest(paramiko.HostKeys.hash_host(cand, item), item)
            for item in self.hashed
            for cand in {lowered, name}
        )


def _wildcard(pattern: str, text: str) -> bool:
    """sshd(8) wildcards: `*` any run, `?` one character, everything else literal (`[` too)."""
    # Iterative, backtracking only to the last `*`: a pattern with many stars cannot make a
    # connect hang the way a regex or a recursive matcher could.
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and pattern[p] in ("?", text[t]):
            p, t = p + 1, t + 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark, p = p, t, p + 1
        elif star >= 0:
            mark += 1
            p, t = star + 1, mark
        else:
            return False
    return pattern[p:].strip("*") == ""


def _hashed_name(item: str) -> str:
    """`|1|salt|hash` checked (hash_host asserts a 20-byte salt) and in hash_host's spelling."""
    _, _, rest = item.partition(HASH_MAGIC)
    salt64, sep, digest64 = rest.partition("|")
    try:
        salt = base64.b64decode(salt64, validate=True)
        digest = base64.b64decode(digest64, validate=True)
    except (binascii.Error, ValueError):
        salt = digest = b""
    if not sep or len(salt) != 20 or len(digest) != 20:
        raise MalformedLineError(f"hashed host name {item[:40]!r} is not |1|salt|hash")
    return f"{HASH_MAGIC}{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _key_blob(keytype: str, text: str) -> bytes:
    try:
        blob = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedLineError("the key is not valid base64") from None
    if len(blob) < 4:
        raise MalformedLineError("the key is truncated")
    (size,) = struct.unpack(">I", blob[:4])
    if blob[4 : 4 + size] != keytype.encode() or len(blob) <= 4 + size:
        raise MalformedLineError(f"the key is not a {keytype[:40]!r} key")
    return blob


def parse_line(path: str, lineno: int, text: str) -> KnownHostLine | None:
    """One known_hosts line; None for blanks, comments and @cert-authority; raises if malformed."""
    # Fields are separated by spaces and tabs only, as in OpenSSH; a file from Windows keeps \r.
    fields = [f for f in _FIELD_SEPARATORS.split(text.strip(" \t\r\n")) if f]
    if not fields or fields[0].startswith("#"):
        return None
    marker = ""
    if fields[0].startswith("@"):
        marker = fields.pop(0)
        if marker == CERT_AUTHORITY:
            return None
        if marker != REVOKED:
            raise MalformedLineError(
                f"unknown marker {marker[:40]!r} (known: @revoked, @cert-authority)"
            )
    if len(fields) < 3:
        raise MalformedLineError("expected host names, a key type and a base64 key")
    hosts, keytype, key = fields[:3]
    patterns: list[str] = []
    hashed: list[str] = []
    for item in hosts.split(","):
        if item.startswith(HASH_MAGIC):
            hashed.append(_hashed_name(item))
        elif item.startswith("|"):
            raise MalformedLineError(f"hashed host name {item[:40]!r} is not |1|salt|hash")
        else:
            patterns.append(item)
    return KnownHostLine(
        path, lineno, marker, tuple(patterns), tuple(hashed), keytype, _key_blob(keytype, key)
    )


@dataclass(frozen=True)
class KnownHosts:
    """Every usable line of some known_hosts files, and the notes about lines that were not."""

    files: tuple[str, ...]
    lines: tuple[KnownHostLine, ...]
    notes: tuple[str, ...]

    def revoked(self, blob: bytes) -> KnownHostLine | None:
        """The first @revoked line holding this key, whichever hosts it names."""
        return next((x for x in self.lines if x.marker == REVOKED and x.blob == blob), None)

    def for_host(self, name: str) -> list[KnownHostLine]:
        """Plain lines naming `name`, in file order."""
        return [x for x in self.lines if not x.marker and x.matches(name)]

    def key_types(self, name: str) -> list[str]:
        """Key types of the unrevoked keys known for `name`, first seen first."""
        types: dict[str, None] = {}
        for line in self.for_host(name):
            if self.revoked(line.blob) is None:
                types.setdefault(line.keytype)
        return list(types)


def load_known_hosts(files: Sequence[str]) -> KnownHosts:
    """Parse files (missing ones are skipped quietly); never raises on their content."""
    lines: list[KnownHostLine] = []
    notes: list[str] = []
    for name in files:
        path = Path(name)
        if not path.is_file():
            continue
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            notes.append(
                f"{name}: cannot be read ({exc.strerror or exc}); skipped, fix its permissions"
            )
            continue
        # split on \n only: str.splitlines would also break at \x0b, \x1c... and misnumber lines
        for lineno, raw in enumerate(text.split("\n"), 1):
            try:
                line = parse_line(name, lineno, raw)
            except MalformedLineError as exc:
                notes.append(
                    f"{name}:{lineno}: skipped a malformed known_hosts line ({exc}); "
                    "fix or delete it"
                )
                continue
            if line is not None:
                lines.append(line)
            elif _FIELD_SEPARATORS.split(raw.strip(" \t\r\n"))[0] == CERT_AUTHORITY:
                notes.append(
                    f"{name}:{lineno}: skipped an @cert-authority line: host certificates are "
                    "not supported; list the box's own host key to trust it"
                )
    for note in notes:
        _log_once(note)
    return KnownHosts(tuple(files), tuple(lines), tuple(notes))


def _log_once(note: str) -> None:
    # Many boxes and retries read the same files; one note per line per process is enough.
    with _noted_lock:
        if note in _noted:
            return
        _noted.add(note)
    log.warning("charpin-remote: note: %s", note)


def preferred_key_types(offered: Sequence[str], known: Iterable[str]) -> list[str]:
    """offered, reordered so algorithms of known key types come first (as ssh does)."""
    wanted = {algo for kind in known for algo in _ALGORITHMS.get(kind, (kind,))}
    return [t for t in offered if t in wanted] + [t for t in offered if t not in wanted]


class HostKeyRefused(paramiko.SSHException):
    """The server's key is not trusted; explain() is the one-line message with the fix."""

    def __init__(self, endpoint: str, key: paramiko.PKey, files: Sequence[str]):
        super().__init__(f"host key for {endpoint} is not trusted")
        self.endpoint = endpoint
        self.key = key
        self.files = tuple(files)

    def explain(self) -> str:
        """What happened, which key and file, and what to do."""
        raise NotImplementedError


class HostKeyUnknown(HostKeyRefused):
    """The server's key is in none of the known_hosts files and --accept-new was not given."""

    def explain(self) -> str:
        where = ", ".join(self.files) or "no known_hosts file is configured"
        return (
            f"host key for {self.endpoint} is not in known_hosts ({where}); fingerprint "
            f"{fingerprint(self.key)}; verify it, then add it or rerun with --accept-new"
        )


class HostKeyChanged(HostKeyRefused):
    """The server's key differs from the ones known_hosts holds for this endpoint."""

    def __init__(
        self,
        endpoint: str,
        key: paramiko.PKey,
        files: Sequence[str],
        expected: Sequence[KnownHostLine],
    ):
        super().__init__(endpoint, key, files)
        self.expected = tuple(expected)

    def explain(self) -> str:
        # name the key of the same type when there is one: that is the one that changed
        same = [x for x in self.expected if x.keytype == self.key.get_name()]
        shown = (same or list(self.expected))[0]
        holders = list(dict.fromkeys(x.path for x in self.expected))
        # ssh-keygen -R edits ~/.ssh/known_hosts unless told which file holds the old key.
        remove = " && ".join(
            f"ssh-keygen -R {shlex.quote(self.endpoint)} -f {shlex.quote(name)}" for name in holders
        )
        where = ", ".join(x.where for x in self.expected)
        return (
            f"host key CHANGED for {self.endpoint}: expected {shown.fingerprint}, "
            f"got {fingerprint(self.key)} ({where}); refusing: if the change is expected, "
            f"remove the old line ({remove})"
        )


class HostKeyRevoked(HostKeyRefused):
    """The server's key is on an @revoked line; refused whatever other lines say."""

    def __init__(
        self, endpoint: str, key: paramiko.PKey, files: Sequence[str], line: KnownHostLine
    ):
        super().__init__(endpoint, key, files)
        self.line = line

    def explain(self) -> str:
        return (
            f"host key for {self.endpoint} is REVOKED: {fingerprint(self.key)} is on the "
            f"@revoked line {self.line.where}; refusing: the box needs a new host key (if the "
            "revocation is a mistake, delete that line)"
        )


class HostKeyVerifier(paramiko.MissingHostKeyPolicy):
    """The one place a server key is judged (paramiko holds no keys, so it always asks here)."""

    def __init__(self, spec: HostSpec, *, accept_new: bool):
        self.endpoint = spec.endpoint
        self.files = spec.known_hosts_files
        self.user_files = spec.user_known_hosts
        self.accept_new = accept_new
        self.known = load_known_hosts(self.files)
        self.accepted: str | None = None

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        self.verify(key)

    def verify(self, key: paramiko.PKey) -> None:
        """Return if key is trusted for the endpoint (maybe after --accept-new); else raise."""
        blob = key.asbytes()
        revoked = self.known.revoked(blob)
        if revoked is not None:
            raise HostKeyRevoked(self.endpoint, key, self.files, revoked)
        lines = self.known.for_host(self.endpoint)
        if any(line.blob == blob for line in lines):
            return
        if lines:
            raise HostKeyChanged(self.endpoint, key, self.files, lines)
        if not self.accept_new:
            raise HostKeyUnknown(self.endpoint, key, self.files)
        if not self.user_files:
            raise HostKeyUnknown(self.endpoint, key, ())
        append_known_host(Path(self.user_files[0]), self.endpoint, key)
        self.accepted = fingerprint(key)

    def key_types(self, offered: Sequence[str]) -> list[str]:
        """The host-key algorithms to offer, known types for this endpoint first."""
        return preferred_key_types(offered, self.known.key_types(self.endpoint))


class StrictClient(paramiko.SSHClient):
    """SSHClient whose every server key goes through a HostKeyVerifier, before authentication."""

    def __init__(self, verifier: HostKeyVerifier):
        super().__init__()
        self.verifier = verifier
        # No load_system_host_keys(): with no keys of its own paramiko asks the policy every time.
        self.set_missing_host_key_policy(verifier)

    def connect(self, hostname: str, *args: Any, **kwargs: Any) -> None:
        # (not named _transport: SSHClient keeps its Transport in that attribute)
        kwargs.setdefault("transport_factory", self._new_transport)
        super().connect(hostname, *args, **kwargs)

    def _new_transport(self, sock: Any, **kwargs: Any) -> paramiko.Transport:
        # Like ssh: ask for a key type the files know for this host, so a box with several host
        # keys shows the one we can check rather than paramiko's favourite.
        transport = paramiko.Transport(sock, **kwargs)
        options = transport.get_security_options()
        options.key_types = self.verifier.key_types(list(options.key_types))
        return transport


def append_known_host(path: Path, endpoint: str, key: paramiko.PKey) -> None:
    """Append `endpoint type base64` to path, creating it (0600) and its folder (0700)."""
    # Append one line ourselves: paramiko's save_host_keys would rewrite the whole file and
    # drop comments, hashed entries and markers it does not understand.
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as handle:
        if handle.tell() > 0:
            with path.open("rb") as check:
                check.seek(-1, os.SEEK_END)
                if check.read(1) != b"\n":
                    handle.write(b"\n")
        handle.write(f"{endpoint} {key.get_name()} {key.get_base64()}\n".encode())

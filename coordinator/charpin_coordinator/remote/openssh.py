"""Coordinator side; stdlib and charpin_runner.errors only. ssh_config as OpenSSH reads it: `ssh -G`.

`ssh -G` prints the options OpenSSH would use for a name after Include, Match, canonicalisation
and token expansion, so charpin and `ssh NAME` can never disagree about a box. OpenSSH resolves
ANY name (an unmatched one is its own HostName), so "known" is defined here: a name is known
when some ssh_config block applies to it beyond those that apply to every host (`Host *`, a bare
`Match all`), i.e. when its options differ from those of a name no config names.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import pwd
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from charpin_runner.errors import ConfigError, UsageError

# A name no ssh_config names (RFC 6761 reserves .invalid): what every host gets.
PROBE: Final = "charpin-no-such-box.invalid"
_TIMEOUT: Final = 30.0  # CanonicalizeHostname and `Match exec` may take a while
# The characters OpenSSH refuses in a host name given on its command line (ssh.c valid_hostname).
_REFUSED: Final = frozenset("'`\"$\\;&<>|(){}")
# The default identities ssh -G lists when no IdentityFile is set; missing ones are skipped,
# as OpenSSH skips them.
_DEFAULT_IDENTITY: Final = "~/.ssh/id_"

Options = Mapping[str, list[str]]


def find_ssh() -> str | None:
    """The OpenSSH client on PATH, or None (then paramiko's parser reads ssh_config)."""
    return shutil.which("ssh")


def check_name(name: str) -> None:
    """Refuse a box name OpenSSH would refuse as a host name, whichever reader is used."""
    # `@` and ssh:// would make OpenSSH read a user (and a port) out of the name.
    bad = (
        name.startswith(("-", "ssh://"))
        or "@" in name
        or any(ch in _REFUSED or ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in name)
    )
    if bad:
        raise UsageError(
            f"box name {name!r} is not a host name OpenSSH accepts (no spaces, quotes, "
            "` $ \\ ; & < > | ( ) { } @, no leading - or ssh://); rename its Host alias in the ssh config"
        )


def home_dir() -> Path:
    """The home OpenSSH uses for `~` and ~/.ssh/config: the passwd entry's, not $HOME."""
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        return Path.home()


def resolve(
    ssh: str, name: str, *, config: Path | None, user: str | None = None, port: int | None = None
) -> dict[str, list[str]]:
    """`ssh -G [-F config] [-l user] [-p port] -- name` as key -> values (keys lower case)."""
    argv = [ssh, "-G"]
    if config is not None:
        argv += ["-F", str(config)]
    if user:
        argv += ["-l", user]
    if port:
        argv += ["-p", str(port)]
    argv += ["--", name]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"`ssh -G {name}` took over {_TIMEOUT:.0f} s (a slow Match exec or "
            "CanonicalizeHostname lookup?); fix the ssh config"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot run {ssh}: {exc.strerror}; check the OpenSSH client") from None
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
        why = lines[-1].strip() if lines else f"exit {done.returncode}"
        raise ConfigError(f"`ssh -G {name}` refused the ssh config: {why}; fix that line")
    options: dict[str, list[str]] = {}
    for line in done.stdout.decode(errors="replace").splitlines():
        key, _, value = line.partition(" ")
        if key:
            options.setdefault(key.lower(), []).append(value.strip())
    return options


def is_named(name: str, options: Options, generic: Options) -> bool:
    """Whether a block applies to name beyond those for every host: its options differ from the
    probe's once the probe's name is read as this one (so `Host *` with %h tokens still
    counts as generic)."""

    def normal(values: Options, own: str) -> dict[str, list[str]]:
        lowered = own.lower()
        return {
            key: [v.replace(own, name).replace(lowered, name.lower()) for v in vals]
            for key, vals in values.items()
            if key != "host"  # `host` is the name as typed
        }

    return normal(options, name) != normal(generic, PROBE)


def first(options: Options, key: str, default: str = "") -> str:
    values = options.get(key)
    return values[0] if values else default


def identity_files(options: Options, *, name: str) -> tuple[str, ...]:
    """IdentityFile entries with their %-tokens expanded (ssh -G leaves them as written), the
    defaults that do not exist dropped."""
    found = []
    for raw in options.get("identityfile", []):
        path = expand_tokens(raw, options, name=name)
        if raw.startswith(_DEFAULT_IDENTITY) and not Path(path).is_file():
            continue
        found.append(path)
    return tuple(found)


def expand_tokens(value: str, options: Options, *, name: str) -> str:
    """OpenSSH's TOKENS for IdentityFile: %% %C %d %h %i %k %L %l %n %p %r %u, and ~."""
    home = str(home_dir())
    host, port, user = first(options, "hostname", name), first(options, "port", "22"), ""
    user = first(options, "user")
    local = socket.gethostname()
    known = {
        "%": "%",
        "d": home,
        "h": host,
        "i": str(os.getuid()),
        "k": first(options, "hostkeyalias", host),
        "L": local.split(".")[0],
        "l": local,
        "n": name,
        "p": port,
        "r": user,
        "u": getpass.getuser(),
    }
    known["C"] = hashlib.sha1(
        f"{local}{host}{port}{user}".encode(), usedforsecurity=False
    ).hexdigest()
    out = []
    index = 0
    while index < len(value):
        char = value[index]
        if char != "%":
            out.append(char)
            index += 1
            continue
        token = value[index + 1 : index + 2]
        if token not in known:
            raise ConfigError(
                f"IdentityFile {value!r} for {name} has the unknown token %{token}; "
                "see TOKENS in ssh_config(5)"
            )
        out.append(known[token])
        index += 2
    text = "".join(out)
    if text == "~" or text.startswith("~/"):
        text = home + text[1:]
    return text

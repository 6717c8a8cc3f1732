"""Coordinator side; may import msgspec and paramiko.config (file parsing only, never the network).

Turns `--hosts a,b` into HostSpecs: `local` and `clean` are built in and never looked up; every
other name is resolved through ssh_config (HostName, Port, User, IdentityFile, IdentitiesOnly,
UserKnownHostsFile, GlobalKnownHostsFile, ProxyJump) and gets its `[tool.charpin.hosts.NAME]`
extras. Where OpenSSH is installed, `ssh -G` reads the config (openssh.py: Include, Match,
canonicalisation, tokens); only without it does paramiko's parser. Host names are only ever
looked up, never put into a shell.
"""

from __future__ import annotations

import difflib
import getpass
import itertools
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
from charpin_runner.envinfo import looks_secret
from charpin_runner.errors import ConfigError, UsageError

from charpin_coordinator.remote import openssh
from charpin_coordinator.remote.openssh import Options

if TYPE_CHECKING:  # paramiko costs ~0.2 s to import: load it only when a name needs ssh_config
    from paramiko.config import SSHConfig

BUILTIN_BOXES: Final = ("local", "clean")
SYSTEM_SSH_CONFIG: Final = Path("/etc/ssh/ssh_config")
DEFAULT_USER_KNOWN_HOSTS: Final = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS: Final = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
MAX_JUMP_DEPTH: Final = 8
# resolve_hosts(ssh=AUTO): `ssh -G` when an OpenSSH client is on PATH, else paramiko's parser.
AUTO: Final = "auto"


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class HostExtras(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """`[tool.charpin.hosts.NAME]`: what one box needs beyond ssh_config."""

    python: str | None = None
    setup: list[str] | None = None  # replaces the repository-level setup commands
    timeout: float | None = None  # per-box deadline in seconds
    env: list[str] = msgspec.field(default_factory=list)  # coordinator env names to pass on
    # A disposable server: shell lines run on this machine that make it and remove it.
    provision: list[str] | None = None
    dispose: list[str] | None = None
    # The disk cap of charpin's caches on the box (venvs, cache repositories, runners, run
    # folders): every run brings the box back under it; `hosts gc` too.
    cache_max_mb: int | None = None
    cache_max_days: float | None = None

    def cache_cap(self) -> dict[str, Any]:
        """The cap as the agent's requests carry it (what is not set keeps its default)."""
        cap: dict[str, Any] = {}
        if self.cache_max_mb is not None:
            cap["max_mb"] = self.cache_max_mb
        if self.cache_max_days is not None:
            cap["max_days"] = self.cache_max_days
        return cap


@dataclass(frozen=True)
class HostSpec:
    """One box, fully resolved. Built-in boxes have builtin=True and no SSH fields."""

    name: str
    hostname: str = ""
    port: int = 22
    user: str = ""
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    user_known_hosts: tuple[str, ...] = ()
    global_known_hosts: tuple[str, ...] = ()
    proxy_jump: tuple[HostSpec, ...] = ()
    extras: HostExtras = field(default_factory=HostExtras)
    builtin: bool = False

    @property
    def known_hosts_files(self) -> tuple[str, ...]:
        """Every known_hosts file consulted, user files first."""
        return self.user_known_hosts + self.global_known_hosts

    @property
    def endpoint(self) -> str:
        """The address as known_hosts names it: host, or [host]:port off port 22."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def is_secret_name(name: str) -> bool:
    """Tell whether an environment variable name looks like it holds a credential."""
    return looks_secret(name)


def check_env_names(names: Sequence[str], *, where: str) -> None:
    """Refuse env allow-list entries that are not names or look like secrets."""
    for name in names:
        if not _ENV_NAME.match(name):
            raise ConfigError(
                f"{name!r} is not an environment variable name - at `{where}`; "
                "use letters, digits and _"
            )
        if is_secret_name(name):
            raise ConfigError(
                f"{name} looks like a secret - at `{where}`; charpin never sends credentials "
                "to boxes: remove it from the allow-list"
            )


def decode_host_extras(
    table: Mapping[str, Any] | None, path: str = "$.tool.charpin.hosts"
) -> dict[str, HostExtras]:
    """Validate `[tool.charpin.hosts]` strictly; errors name the `$.path` of the bad value."""
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"Expected `object`, got `{type(table).__name__}` - at `{path}`")
    extras = {}
    for name, value in table.items():
        # one convert per box so the path names the box, not msgspec's `$[...]`
        where = f"{path}.{name}" if re.fullmatch(r"[\w.-]+", str(name)) else f"{path}[{name!r}]"
        try:
            extra = msgspec.convert(value, HostExtras)
        except msgspec.ValidationError as exc:
            message = str(exc)
            if "- at `$" in message:
                message = message.replace("- at `$", f"- at `{where}", 1)
            else:
                message = f"{message} - at `{where}`"
            raise ConfigError(f"{message}; fix that value in pyproject.toml") from None
        check_env_names(extra.env, where=f"{where}.env")
        if extra.cache_max_mb is not None and extra.cache_max_mb < 0:
            raise ConfigError(
                f"cache_max_mb must be a size in MB, 0 or more - at `{where}.cache_max_mb`"
            )
        if extra.cache_max_days is not None and not 0 <= extra.cache_max_days < float("inf"):
            raise ConfigError(
                f"cache_max_days must be a number of days, 0 or more - at `{where}.cache_max_days`"
            )
        if extra.timeout is not None and extra.timeout <= 0:
            raise ConfigError(
                f"timeout must be a positive number of seconds - at `{where}.timeout`"
            )
        if bool(extra.provision) != bool(extra.dispose):
            raise ConfigError(
                f"provision and dispose come together - at `{where}`; a server that is made "
                "must be removed: give both command lists"
            )
        if extra.provision and name in BUILTIN_BOXES:
            raise ConfigError(f"{name} is a built-in box; it cannot be provisioned - at `{where}`")
        extras[str(name)] = extra
    return extras


def parse_host_list(value: str) -> list[str]:
    """Split `--hosts a,b`; refuse empty and duplicate names."""
    names = [part.strip() for part in value.split(",")]
    if not value.strip() or any(not name for name in names):
        raise UsageError(f"--hosts {value!r} has an empty name; give names like --hosts ci,clean")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise UsageError(f"--hosts names {name!r} twice; give each box once")
        seen.add(name)
    return names


def ssh_config_files(ssh_config: Path | None) -> list[Path]:
    """The ssh_config files consulted: --ssh-config alone (like `ssh -F`), else user + system."""
    if ssh_config is not None:
        return [ssh_config]
    return [Path.home() / ".ssh" / "config", SYSTEM_SSH_CONFIG]


def resolve_hosts(
    names: Sequence[str],
    *,
    ssh_config: Path | None = None,
    extras: Mapping[str, HostExtras] | None = None,
    ssh: str | None = AUTO,
) -> list[HostSpec]:
    """Resolve box names in order; built-ins come back as HostSpec(builtin=True) for the caller.

    ssh: the OpenSSH client whose `ssh -G` reads the config (AUTO: the one on PATH; None:
    paramiko's parser). Raises UsageError for a name no ssh_config block names (beyond those
    for every host) and ConfigError for an unreadable config file.
    """
    extras = extras or {}
    if ssh_config is not None and not ssh_config.is_file():
        raise UsageError(f"--ssh-config {ssh_config}: no such file; give an existing ssh_config")
    client = openssh.find_ssh() if ssh == AUTO else ssh
    reader: _Reader | None = None
    specs = []
    for name in names:
        extra = extras.get(name, HostExtras())
        if name in BUILTIN_BOXES:
            specs.append(HostSpec(name=name, builtin=True, extras=extra))
            continue
        if extra.provision:
            # Made for the run: its address, user, key and host key come from provision.
            specs.append(HostSpec(name=name, extras=extra))
            continue
        openssh.check_name(name)
        if reader is None:  # only SSH names pay for paramiko or ssh -G and the config files
            reader = _OpenSsh(client, ssh_config) if client else _Paramiko(ssh_config)
        if not reader.names(name):
            raise UsageError(reader.unknown(name))
        specs.append(_resolve(reader, name, extra=extra, stack=()))
    return specs


class _Reader:
    """One way of reading ssh_config: options per name, and whether a block names it."""

    files: list[Path]
    how: str

    def options(self, name: str, user: str | None, port: int | None) -> dict[str, Any]:
        raise NotImplementedError

    def names(self, name: str) -> bool:
        raise NotImplementedError

    def identity_files(self, opts: Mapping[str, Any], name: str) -> tuple[str, ...]:
        return tuple(str(Path(p).expanduser()) for p in opts.get("identityfile", []))

    def unknown(self, name: str) -> str:
        searched = ", ".join(str(f) for f in self.files)
        patterns = [p for f in self.files for p in _host_patterns_of(f)]
        known = [*BUILTIN_BOXES, *(p for p in patterns if not any(c in p for c in "*?!"))]
        close = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? Otherwise add " if close else "add "
        return (
            f"unknown host {name!r}: {self.how} in {searched}; {hint}"
            f"`Host {name}` with a HostName there, or pass --ssh-config FILE"
        )


class _OpenSsh(_Reader):
    """`ssh -G`: what `ssh NAME` would use, Include and Match included."""

    def __init__(self, ssh: str, config: Path | None) -> None:
        self.ssh, self.config = ssh, config
        if config is not None:
            self.files = [config]
        else:
            self.files = [openssh.home_dir() / ".ssh" / "config", SYSTEM_SSH_CONFIG]
        self.how = (
            "ssh -G finds no Host or Match block for it beyond those for every host "
            "(Includes followed)"
        )
        self._seen: dict[tuple[str, str | None, int | None], Options] = {}

    def _ssh_g(self, name: str, user: str | None = None, port: int | None = None) -> Options:
        key = (name, user, port)
        if key not in self._seen:  # one `ssh -G` per name: names() and options() share it
            self._seen[key] = openssh.resolve(
                self.ssh, name, config=self.config, user=user, port=port
            )
        return self._seen[key]

    def options(self, name: str, user: str | None, port: int | None) -> dict[str, Any]:
        got = self._ssh_g(name, user, port)
        opts: dict[str, Any] = {k: v[0] for k, v in got.items()}
        opts["identityfile"] = list(openssh.identity_files(got, name=name))
        return opts

    def identity_files(self, opts: Mapping[str, Any], name: str) -> tuple[str, ...]:
        return tuple(opts.get("identityfile", []))

    def names(self, name: str) -> bool:
        return openssh.is_named(name, self._ssh_g(name), self._ssh_g(openssh.PROBE))


class _Paramiko(_Reader):
    """paramiko's parser, for machines without OpenSSH: no Include, Match host only."""

    def __init__(self, config: Path | None) -> None:
        self.files = ssh_config_files(config)
        self.how = "no Host block matches it (OpenSSH is not installed: Include is not read)"
        self.parsed, self.patterns = _load(self.files)

    def options(self, name: str, user: str | None, port: int | None) -> dict[str, Any]:
        return dict(self.parsed.lookup(name))

    def names(self, name: str) -> bool:
        return _named_in(name, self.patterns)


def _host_patterns_of(path: Path, depth: int = 0) -> list[str]:
    """Host patterns of a config file and of the files it Includes (for "did you mean")."""
    try:
        text = path.read_text()
    except OSError:
        return []
    found = _host_patterns(text)
    if depth >= MAX_JUMP_DEPTH:
        return found
    for line in text.splitlines():
        match = re.match(r"\s*include(?:\s*=\s*|\s+)(.+)", line, re.IGNORECASE)
        if not match:
            continue
        for word in match.group(1).split():
            pattern = Path(word).expanduser()
            if not pattern.is_absolute():  # OpenSSH: relative to ~/.ssh (or /etc/ssh)
                pattern = path.parent / pattern
            for included in sorted(pattern.parent.glob(pattern.name)):
                found += _host_patterns_of(included, depth + 1)
    return found


def _load(files: Sequence[Path]) -> tuple[SSHConfig, list[str]]:
    from paramiko.config import SSHConfig  # lazy: see the TYPE_CHECKING import

    config = SSHConfig()
    patterns: list[str] = []
    for path in files:
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(
                f"cannot read ssh config {path}: {exc.strerror}; fix its permissions"
            ) from None
        try:
            # paramiko keeps "first value wins" across files when they go into one object
            config.parse(text.splitlines())
        except Exception as exc:  # paramiko raises ConfigParseError or plain ValueErrors
            raise ConfigError(f"ssh config {path} is not valid: {exc}; fix that line") from None
        patterns.extend(_host_patterns(text))
    return config, patterns


def _host_patterns(text: str) -> list[str]:
    """Patterns of `Host` lines and `Match host` criteria, as written."""
    found: list[str] = []
    for line in text.splitlines():
        match = re.match(r"\s*(host|match)(?:\s*=\s*|\s+)(.+)", line, re.IGNORECASE)
        if not match:
            continue
        try:
            words = shlex.split(match.group(2))
        except ValueError:
            continue
        if match.group(1).lower() == "host":
            found.extend(words)
            continue
        for key, value in itertools.pairwise(words):
            if key.lower() in ("host", "originalhost"):
                found.extend(value.split(","))
    return found


def _named_in(name: str, patterns: Sequence[str]) -> bool:
    for pattern in patterns:
        if pattern == "*" or pattern.startswith("!"):
            continue
        if fnmatchcase(name, pattern):
            return True
    return False


def _resolve(
    config: _Reader,
    name: str,
    *,
    extra: HostExtras,
    stack: tuple[str, ...],
    user: str | None = None,
    port: int | None = None,
) -> HostSpec:
    if name in stack or len(stack) >= MAX_JUMP_DEPTH:
        chain = " -> ".join((*stack, name))
        raise ConfigError(f"ProxyJump loops or nests too deep ({chain}); fix the ssh config")
    opts = config.options(name, user, port)
    hostname = str(opts.get("hostname", name))
    if not hostname or "@" in hostname or any(ch.isspace() for ch in hostname):
        raise ConfigError(
            f"{hostname!r} (for {name}) is not a host name; set `HostName` for it in the ssh config"
        )
    try:
        resolved_port = port or int(opts.get("port", 22))
    except ValueError:
        raise ConfigError(f"Port {opts.get('port')!r} for {name} is not a number") from None
    jumps: list[HostSpec] = []
    raw_jump = opts.get("proxyjump")
    if raw_jump and str(raw_jump).lower() != "none":
        for hop in str(raw_jump).split(","):
            hop_user, hop_host, hop_port = _split_hop(hop.strip(), owner=name)
            jumps.append(
                _resolve(
                    config,
                    hop_host,
                    extra=HostExtras(),
                    stack=(*stack, name),
                    user=hop_user,
                    port=hop_port,
                )
            )
    return HostSpec(
        name=name,
        hostname=hostname,
        port=resolved_port,
        user=user or str(opts.get("user") or _local_user()),
        identity_files=config.identity_files(opts, name),
        identities_only=str(opts.get("identitiesonly", "no")).lower() == "yes",
        user_known_hosts=_files(opts.get("userknownhostsfile"), DEFAULT_USER_KNOWN_HOSTS),
        global_known_hosts=_files(opts.get("globalknownhostsfile"), DEFAULT_GLOBAL_KNOWN_HOSTS),
        proxy_jump=tuple(jumps),
        extras=extra,
    )


def _split_hop(hop: str, *, owner: str) -> tuple[str | None, str, int | None]:
    """Parse one ProxyJump entry: [user@]host[:port] or ssh://[user@]host[:port]."""
    rest = hop.removeprefix("ssh://")
    user, _, hostport = rest.rpartition("@")
    host, port = hostport, None
    if hostport.startswith("["):  # [v6addr]:port
        host, _, tail = hostport[1:].partition("]")
        port = tail.removeprefix(":") or None
    elif hostport.count(":") == 1:
        host, port = hostport.split(":")
    if not host:
        raise ConfigError(f"ProxyJump {hop!r} for {owner} names no host; fix the ssh config")
    try:
        number = int(port) if port else None
    except ValueError:
        raise ConfigError(
            f"ProxyJump {hop!r} for {owner} has a bad port; fix the ssh config"
        ) from None
    return user or None, host, number


def _files(value: object, default: tuple[str, ...]) -> tuple[str, ...]:
    # OpenSSH semantics: a configured list replaces the defaults; "none" means no file at all
    words = shlex.split(str(value)) if value else list(default)
    return tuple(str(Path(w).expanduser()) for w in words if w.lower() != "none")


def _local_user() -> str:
    return getpass.getuser()

"""What a process sees inside charpin's sandbox: the bubblewrap arguments of an allow-list view.
Runs on boxes; stdlib only; imports only charpin_runner.interpreters.

Rule 2 of the threat model: deny by default. The view starts empty and gets only what a run of
the code under test needs:

* the system's programs and libraries (/usr and the /bin, /lib... links or folders), and from
  /etc only the files programs read to work (users and groups, name resolution, certificates,
  time zone, locale, the dynamic linker, Python's system config): never /etc/shadow, ssh host
  keys, sudoers, private certificates, or /etc/gitconfig (it may name a credential helper or
  an `http.extraHeader` with a token; git works without it). /etc/passwd and /etc/group stay:
  they hold no password hashes, and `pwd.getpwuid`, `getpass.getuser` and git's default
  identity read them;
* /dev basics, a /proc of its own PID namespace, a private /tmp, HOME and TMPDIR;
* read-only: every interpreter the run uses, with its prefixes and site folders (never the user
  site), and the folders the trusted interpreter's .pth files name (found without running them:
  interpreters.py), the runner's own code and the paths the plan protects;
* writable: the checkout (its .git read-only) and the scratch folders the run needs.

The user's home, ~/.ssh, ~/.aws, ~/.config, signing keys, charpin's state folder, other
repositories and the box caches are simply not there. A test that needs another path fails;
that is the point.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Optional

from charpin_runner import interpreters

# Top-level folders that are either the system's (bound read-only) or, on a merged-/usr
# system, links into /usr (recreated as links).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs read from /etc to work; nothing here holds a secret.
ETC = (
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "hostname",
    "resolv.conf",
    "nsswitch.conf",
    "gai.conf",
    "services",
    "protocols",
    "networks",
    "localtime",
    "timezone",
    "locale.alias",
    "locale.conf",
    "default/locale",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
    "pki/ca-trust",
    "alternatives",
    "mime.types",
    "os-release",
    "debian_version",
    "lsb-release",
    "fonts",
    "xdg",
    "mailcap",
    "magic",
    "magic.mime",
)
# /etc entries whose names vary by version (python3.11/, pythonX.Y sitecustomize): by prefix.
ETC_PREFIXES = ("python",)
# Variables that name places outside the view, and the agent socket: gone inside.
UNSET = (
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "SSH_AUTH_SOCK",
    "GNUPGHOME",
)


def arguments(
    *,
    visible: Iterable[str],
    writable: Sequence[str],
    read_only_inside: Iterable[str] = (),
    hidden: Iterable[str] = (),
    home: Optional[str],
    tmp: Optional[str],
    network: bool = True,
    pythons: Iterable[str] = (),
) -> list[str]:
    """bwrap's options (without the program and `--`) for one allow-list view.

    visible: read-only paths; writable: read-write paths (later binds win, so a writable path
    inside a read-only one stays writable); read_only_inside: paths bound read-only again after
    the writable ones (a checkout's .git, the repository's .charpin/); hidden: masked if some
    bind made them visible; home and tmp: the private HOME and TMPDIR (made writable; None:
    the command sets its own, as pins do); pythons: interpreters whose whole environment is
    made visible."""
    # No --new-session: the test command is already a session of its own without a terminal
    # (so TIOCSTI cannot type into the user's), and its process group must stay killable.
    args = ["--unshare-pid", "--die-with-parent", "--cap-drop", "ALL"]
    if not network:
        args.append("--unshare-net")
    # Fresh, private tmpfs mounts inside the new namespace, not the host's folders.
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp"]  # noqa: S108
    args += _system()
    seen_ro: list[str] = []
    for python in pythons:
        seen_ro += interpreters.paths_of(python)
    seen_ro += [os.path.abspath(p) for p in visible]
    for path in _existing(seen_ro):
        args += ["--ro-bind", path, path]
    for path in _existing([*writable, *(p for p in (home, tmp) if p)]):
        args += ["--bind", path, path]
    for path in _existing(read_only_inside):
        args += ["--ro-bind", path, path]
    for path in _existing(hidden):
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--tmpfs", path]
        else:
            args += ["--ro-bind", os.devnull, path]
    if home and tmp:
        args += ["--setenv", "HOME", home, "--setenv", "TMPDIR", tmp]
    for name in UNSET:
        args += ["--unsetenv", name]
    return args


def _system() -> list[str]:
    args: list[str] = []
    for top in SYSTEM:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for path in _etc():
        args += ["--ro-bind", path, path]
        real = os.path.realpath(path)
        if real != path and not real.startswith(("/usr/", "/etc/")) and os.path.exists(real):
            # /etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf: the target too.
            args += ["--ro-bind", real, real]
    return args


def _etc() -> list[str]:
    found = [os.path.join("/etc", name) for name in ETC]
    try:
        names = sorted(os.listdir("/etc"))
    except OSError:
        names = []
    found += [os.path.join("/etc", n) for n in names if n.startswith(ETC_PREFIXES)]
    return [p for p in found if os.path.lexists(p)]


def _existing(paths: Iterable[str]) -> list[str]:
    """Absolute paths that exist, once each, in order."""
    out: list[str] = []
    for path in paths:
        path = os.path.abspath(path)
        if not os.path.exists(path) or path in out:
            continue
        out.append(path)
    return out

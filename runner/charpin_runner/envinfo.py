"""Allow-listed facts about this box for the receipt. Runs on boxes; stdlib only.

Environment capture is an allow-list (BASE_ENV_ALLOW + env_allow), and a name that looks like a
secret is refused even when allow-listed: a receipt may travel to a public log, where a leak can
never be redacted. Other variables are only counted; their names are never written.
"""

from __future__ import annotations

import fnmatch
import locale
import os
import platform
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from charpin_runner.fixtures import hash_file, printable
from charpin_runner.receipt import Environment

# Names matching any of these (case-insensitive) are never recorded, never sent to a box and
# redacted from every artifact, whatever an allow-list says. The coordinator uses this rule too.
SECRET_PATTERNS = (
    "*TOKEN*",
    "*SECRET*",
    "*PASSW*",
    "*KEY*",
    "*CREDENTIAL*",
    "*PRIVATE*",
    "*COOKIE*",
    "SSH_AUTH_SOCK",
    "*_AUTH*",
    "AUTH_*",
)


def looks_secret(name: str) -> bool:
    """True when a variable name looks like it holds a secret."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_PATTERNS)


def pick_variables(environ: Mapping[str, str], allow: Iterable[str]) -> tuple[dict[str, str], int]:
    """Return (allow-listed, non-secret variables; count of every other variable)."""
    allowed = {name for name in allow if not looks_secret(name)}
    kept = {name: environ[name] for name in sorted(allowed) if name in environ}
    return kept, len(environ) - len(kept)


def conftest_digests(repo: Path, paths: Sequence[str]) -> dict[str, str]:
    """sha256 of each conftest file the probe reported, hashed here by the parent."""
    repo_real = os.path.realpath(repo)
    out: dict[str, str] = {}
    for raw in paths:
        full = os.path.realpath(os.path.join(repo_real, raw))
        if full != repo_real and not full.startswith(repo_real + os.sep):
            # Only files inside the repository are ours to hash; name others without reading.
            out[printable(raw)] = "outside-repository"
            continue
        digest = hash_file(full)
        out[printable(os.path.relpath(full, repo_real))] = digest or "missing"
    return out


def collect(
    *,
    repo: Path,
    allow: Iterable[str],
    conftests: Sequence[str],
    plugins: Sequence[str],
    pytest_version: str | None,
    host_key_fingerprint: str | None,
    host_key_accepted_new: bool,
    environ: Mapping[str, str] | None = None,
) -> Environment:
    """Build the receipt's environment block."""
    env = os.environ if environ is None else environ
    variables, omitted = pick_variables(env, allow)
    return Environment(
        python=platform.python_version(),
        implementation=platform.python_implementation(),
        platform=platform.platform(),
        machine=platform.machine(),
        locale=_locale(env),
        tz=_timezone(env),
        cpu_count=os.cpu_count() or 0,
        variables=variables,
        omitted_variables=omitted,
        conftest_sha256=conftest_digests(repo, conftests),
        plugins=sorted(plugins),
        pytest_version=pytest_version,
        host_key_fingerprint=host_key_fingerprint,
        host_key_accepted_new=host_key_accepted_new,
    )


def _locale(env: Mapping[str, str]) -> str:
    """The locale the test command inherits (POSIX precedence), and Python's encoding."""
    name = next((env[k] for k in ("LC_ALL", "LC_CTYPE", "LANG") if env.get(k)), "C")
    return f"{name} ({locale.getpreferredencoding(False)})"


def _timezone(env: Mapping[str, str]) -> str:
    if env.get("TZ"):
        return env["TZ"]
    try:
        target = os.readlink("/etc/localtime")
    except OSError:
        target = ""
    if "zoneinfo/" in target:
        return target.split("zoneinfo/", 1)[1]
    return time.tzname[0]

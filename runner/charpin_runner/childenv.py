"""The environment charpin's children that run a commit's code get: an allow-list. Runs on boxes;
stdlib only; imports charpin_runner.config and charpin_runner.envinfo.

Rule 6 (nothing secret leaves in any form) starts here: the tests, pins, replays, setup and
prepare lines never get this machine's credentials, so none can leave in a form the redactor
does not know (halves in test ids, rot13, one character per line). Redaction of every artefact
stays as a second layer. Everything not named here is dropped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Optional

from charpin_runner.config import BASE_ENV_ALLOW
from charpin_runner.envinfo import looks_secret

# What a program needs from the environment to run at all; none of it is a credential. HOME and
# TMPDIR are the sandbox's own under bubblewrap (sandview.py sets them).
KEEP = (
    "PATH",
    "HOME",
    "TMPDIR",
    "TERM",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "SOURCE_DATE_EPOCH",
)
KEEP_PREFIXES = ("LC_",)
# What package installers read to reach an index (setup and prepare lines install packages):
# their own settings, proxies and certificate bundles; a name that looks secret never.
INSTALL_PREFIXES = ("PIP_", "UV_", "PDM_", "POETRY_", "HATCH_", "SETUPTOOLS_")
INSTALL = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
)


def for_tests(
    environ: Mapping[str, str],
    env_allow: Sequence[str],
    passed: Sequence[str] = (),
    scratch: Optional[str] = None,
) -> dict[str, str]:
    """environ reduced to the allow-list (see the module docstring), with charpin's settings."""
    names = set(KEEP) | set(BASE_ENV_ALLOW) | set(passed)
    names |= {name for name in env_allow if not looks_secret(name)}
    env = {k: v for k, v in environ.items() if k in names or k.startswith(KEEP_PREFIXES)}
    env["PYTHONNOUSERSITE"] = "1"
    if scratch is not None:
        cache = os.path.join(scratch, "pycache")
        os.makedirs(cache, exist_ok=True)
        env["PYTHONPYCACHEPREFIX"] = cache
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONPYCACHEPREFIX"] = os.devnull  # a path no cache can be read from or made in
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def for_setup(environ: Mapping[str, str], **extra: str) -> dict[str, str]:
    """What a setup or prepare line gets: the tests' allow-list plus the installers' settings
    (names that look secret dropped: an index URL with a password belongs in pip's config
    file, which setup sees read-only), then extra (VIRTUAL_ENV, PATH)."""
    env = for_tests(environ, ())
    env.pop("PYTHONPYCACHEPREFIX", None)  # pip compiles what it installs where it installs it
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for name, value in environ.items():
        if (name in INSTALL or name.startswith(INSTALL_PREFIXES)) and not looks_secret(name):
            env[name] = value
    env.update(extra)
    return env

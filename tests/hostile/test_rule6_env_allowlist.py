"""Rule 6, first layer: the tests never get this machine's secrets at all.

Seen by an attacker (b07): on `local` a test printed a secret variable in 16 forms the redactor
does not know (its halves as parametrize ids, one character per line, upper case, rot13,
hex...); 14 reached drift.md, drift.json and the logs. Masking every form cannot keep up, so the
tests' environment is an allow-list (childenv.py): PATH, locale, TZ, TERM, HOME/TMPDIR, the
receipt's `env_allow` (names that look secret never) and what charpin sets. The second attack
of the class was not fixed by hand: a credential in a variable whose name does not look secret
(a Sentry DSN with its key), which no redactor can know to mask.
"""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from tests.hostile.harness import repo_with, run, said

TOKEN = "ghp_9fK2qLm7Xv3RtYw8Zc1Nb5Hd0Jp4Sa6Ue"
DSN = "https://4f1c9e07b2d84a6a9c5e31d7f0b8a2c6@o42.ingest.example.io/7"
LEAKER = """
import codecs, os
import pytest

T = os.environ.get("DEPLOY_TOKEN", "absent-token-value")
D = os.environ.get("SENTRY_DSN", "absent-dsn-value")


@pytest.mark.parametrize("part", [T[:18], T[18:], D[8:40]])
def test_halves(part):
    pass


def test_print():
    print("ATTEMPT names", sorted(os.environ))
    print("ATTEMPT mode", os.environ.get("APP_MODE"))
    print("-".join(T)); print(T.upper()); print(codecs.encode(T, "rot13"))
    print(T.encode().hex()); print(T[:18]); print(T[18:]); print(D)
"""
TOML = '[tool.charpin]\npytest_args = ["-s"]\nenv_allow = ["APP_MODE", "DEPLOY_TOKEN"]\n'


def _forms() -> dict[str, str]:
    return {
        "token-first-half": TOKEN[:18],
        "token-second-half": TOKEN[18:],
        "token-joined": "-".join(TOKEN),
        "token-upper": TOKEN.upper(),
        "token-rot13": codecs.encode(TOKEN, "rot13"),
        "token-hex": TOKEN.encode().hex(),
        "dsn-key": DSN[8:40],
    }


def _found(*folders: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for folder in folders:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            data = path.read_bytes()
            for name, form in _forms().items():
                if form.encode() in data:
                    found.setdefault(name, []).append(path.name)
    return found


@pytest.mark.slow
def test_a_secret_variable_never_reaches_the_tests_in_any_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEPLOY_TOKEN", TOKEN)  # named by env_allow, and still refused
    monkeypatch.setenv("SENTRY_DSN", DSN)  # the second attack: a name that does not look secret
    monkeypatch.setenv("APP_MODE", "staging")
    repo = repo_with(tmp_path / "repo", {"tests/test_leak.py": LEAKER}, toml=TOML)
    _, _, folder = run(repo, "local", "--markdown", str(tmp_path / "runs" / "drift.md"))
    told = said(folder, "local")
    # The allow-list gives what it names (so this test can fail) and nothing else.
    assert "mode staging" in told, told
    assert "DEPLOY_TOKEN" not in told and "SENTRY_DSN" not in told, told
    assert _found(tmp_path / "runs", repo / ".charpin") == {}


def test_the_allow_list_itself() -> None:
    from charpin_runner.childenv import for_setup, for_tests

    environ = {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "DEPLOY_TOKEN": TOKEN,
        "SENTRY_DSN": DSN,
        "AWS_PROFILE": "prod",
        "APP_MODE": "x",
        "PIP_INDEX_URL": "https://pypi.example/simple",
        "PIP_PASSWORD": "hunter22",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env = for_tests(environ, ["APP_MODE", "DEPLOY_TOKEN"], scratch=None)
    assert set(env) == {
        "PATH",
        "LC_ALL",
        "APP_MODE",
        "PYTHONNOUSERSITE",
        "PYTHONPYCACHEPREFIX",
        "PYTHONDONTWRITEBYTECODE",
    }
    setup = for_setup(environ, VIRTUAL_ENV="/v")
    assert setup["PIP_INDEX_URL"] and setup["VIRTUAL_ENV"] == "/v"
    assert not {"DEPLOY_TOKEN", "SENTRY_DSN", "PIP_PASSWORD", "AWS_PROFILE"} & set(setup)

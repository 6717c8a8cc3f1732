"""Canary secrets: planted in the environment, they must not reach the receipt or the summary."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from pathlib import Path

from tests.conftest import make_repo
from tests.runner.test_receipt_cmd import charpin, charpin_env, only_receipt

SECRET_NAMES = ("GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "MY_SERVICE_TOKEN")


def encodings(value: str) -> list[str]:
    """The forms a leaked value could take: plain, JSON-escaped, hex, base64, urlsafe base64."""
    raw = value.encode()
    forms = [value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]]
    forms += [raw.hex(), raw.hex().upper()]
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        text = encode(raw).decode()
        forms += [text, text.rstrip("=")]
    return forms


def test_canaries_never_reach_the_receipt_or_the_summary(tmp_path: Path) -> None:
    # Every character an encoder escapes (JSON, Markdown, XML, terminal): a value that is only
    # present escaped must still count. The random token is in every spelling that keeps letters.
    tokens = {name: f"canary{secrets.token_hex(16)}" for name in SECRET_NAMES}
    canaries = {name: f'{token}"\\|`<[\n\t\x1b\u00e9' for name, token in tokens.items()}
    repo = make_repo(
        tmp_path / "repo",
        {
            "pyproject.toml": (
                '[tool.charpin]\nenv_allow = ["GITHUB_TOKEN", "MY_SERVICE_TOKEN", "SAFE_SETTING"]\n'
            ),
            "tests/test_env.py": (
                # The tests never get a secret-looking variable, even one env_allow names;
                # the allow-list still gives them SAFE_SETTING (so this test can fail).
                "import os\ndef test_env():\n    print(dict(os.environ))\n"
                "    assert os.environ['SAFE_SETTING'] == 'visible'\n"
                "    assert not [n for n in os.environ if 'TOKEN' in n or 'SECRET' in n]\n"
                "    assert 'SSH_AUTH_SOCK' not in os.environ\n"
            ),
        },
    )
    result = charpin(repo, env=charpin_env(SAFE_SETTING="visible", **canaries))
    assert result.returncode == 0, result.stderr
    receipt = next((repo / ".charpin" / "receipts").glob("*.json")).read_text()
    for name, value in canaries.items():
        for form in [tokens[name], *encodings(value)]:
            assert form not in receipt, f"{name} leaked into the receipt as {form}"
            assert form not in result.stdout, f"{name} leaked into stdout as {form}"
            assert form not in result.stderr, f"{name} leaked into stderr as {form}"
    environment = only_receipt(repo)["environment"]
    # The allow-list works (so the test above can fail) and secret-looking names are refused.
    assert environment["variables"]["SAFE_SETTING"] == "visible"
    assert not set(SECRET_NAMES) & set(environment["variables"])
    assert environment["omitted_variables"] >= len(SECRET_NAMES)
    for name in ("AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK"):
        assert name not in receipt


def test_secret_looking_names() -> None:
    from charpin_runner.envinfo import looks_secret, pick_variables

    for name in (
        "GITHUB_TOKEN",
        "aws_secret_access_key",
        "DB_PASSWORD",
        "MY_PASSWD",
        "API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_AUTH_SOCK",
        "NPM_AUTH",
        "X_AUTHORITY",
    ):
        assert looks_secret(name), name
    for name in ("LANG", "TZ", "CI", "PYTHONHASHSEED", "AUTHOR"):
        assert not looks_secret(name), name
    kept, omitted = pick_variables(
        {"LANG": "C", "GITHUB_TOKEN": "t", "OTHER": "o"}, ["LANG", "GITHUB_TOKEN"]
    )
    assert (kept, omitted) == ({"LANG": "C"}, 2)


def test_environment_block_facts(tmp_path: Path) -> None:
    from charpin_runner.envinfo import collect

    (tmp_path / "conftest.py").write_text("x = 1\n")
    environment = collect(
        repo=tmp_path,
        allow=["LANG", "TZ", "GITHUB_TOKEN"],
        conftests=["conftest.py", "../elsewhere/conftest.py", "gone/conftest.py"],
        plugins=["b-1", "a-2"],
        pytest_version="8.0",
        host_key_fingerprint="SHA256:x",
        host_key_accepted_new=True,
        environ={"LANG": "de_DE.UTF-8", "TZ": "Europe/Berlin", "GITHUB_TOKEN": "t", "HOME": "/h"},
    )
    assert environment.variables == {"LANG": "de_DE.UTF-8", "TZ": "Europe/Berlin"}
    assert environment.omitted_variables == 2
    assert environment.tz == "Europe/Berlin"
    assert environment.locale.startswith("de_DE.UTF-8")
    assert environment.plugins == ["a-2", "b-1"]
    assert environment.conftest_sha256 == {
        "conftest.py": hashlib.sha256(b"x = 1\n").hexdigest(),
        "../elsewhere/conftest.py": "outside-repository",
        "gone/conftest.py": "missing",
    }

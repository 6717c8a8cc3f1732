"""Secrets of the coordinator's environment never reach run folders, reports or the terminal."""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import sys
import time
import urllib.parse
import xml.sax.saxutils
from pathlib import Path

import pytest
from charpin_coordinator.receipts import load_receipt
from charpin_coordinator.redact import MIN_SECRET_CHARS, Redactor

from tests.conftest import make_repo

ROOT = Path(__file__).resolve().parents[2]
# Every character an encoder escapes: JSON (`"`, `\`, controls), Markdown (`|`, backtick, `[`),
# XML and HTML (`<`), the reports' \xNN for controls, and a non-ASCII letter.
SPECIALS = '"\\|`<[\n\t\x1b\u00e9'
# Each value starts with a unique token of letters and digits: every spelling that keeps a run
# of letters (raw, escaped, percent-encoded) still contains it, so its absence covers them all.
TOKENS = {
    "GITHUB_TOKEN": "cnrygh7c1e0001",
    "AWS_SECRET_ACCESS_KEY": "cnryaws94b20002",
    "MY_SERVICE_TOKEN": "cnrysvc5d0f0003",
}
CANARIES = {name: f"{token}-???>>>~~~{SPECIALS}" for name, token in TOKENS.items()}


def _forms(value: str) -> dict[str, bytes]:
    raw = value.encode()
    return {
        "plain": raw,
        "hex": raw.hex().encode(),
        "HEX": raw.hex().upper().encode(),
        "base64": base64.b64encode(raw).rstrip(b"="),
        "urlsafe-base64": base64.urlsafe_b64encode(raw).rstrip(b"="),
        "json": json.dumps(value, ensure_ascii=False)[1:-1].encode(),
        "json-ascii": json.dumps(value)[1:-1].encode(),
        "repr": repr(value)[1:-1].encode(),
        "unicode-escape": value.encode("unicode_escape"),
        "percent": urllib.parse.quote(value, safe="").encode(),
    }


def _leak_forms(value: str, token: str) -> dict[str, bytes]:
    """What a leak could look like in an artifact: the encodings above, the forms the renderers
    produce (Markdown cell, XML attribute, \\xNN), and the bare token for any other spelling."""
    return {
        **_forms(value),
        "markdown-pipe": value.replace("|", "\\|").encode(),
        "xml": xml.sax.saxutils.escape(value, {'"': "&quot;", "\n": "&#10;"}).encode(),
        "shown-controls": "".join(
            f"\\x{ord(c):02x}" if ord(c) < 0x20 else c for c in value
        ).encode(),
        "token": token.encode(),
    }


def test_canaries_differ_between_base64_alphabets() -> None:
    # Otherwise the urlsafe check below would prove nothing the base64 check does not.
    for value in CANARIES.values():
        forms = _forms(value)
        assert forms["base64"] != forms["urlsafe-base64"]


def test_redactor_masks_every_form_of_a_secret_name_only() -> None:
    redactor = Redactor.from_env({**CANARIES, "HOME": "/home/someone-long", "SHORT_TOKEN": "abc"})
    assert redactor.names == sorted(CANARIES)
    for name, value in CANARIES.items():
        for form in _forms(value).values():
            masked = redactor.data(b"before " + form + b"=after")
            assert form not in masked
            assert f"[redacted:{name}]".encode() in masked
    assert redactor.text("HOME=/home/someone-long") == "HOME=/home/someone-long"
    assert redactor.text("abc") == "abc"  # shorter than MIN_SECRET_CHARS: left alone
    assert len("abc") < MIN_SECRET_CHARS


def test_redactor_masks_the_longer_of_two_overlapping_secrets_whole() -> None:
    redactor = Redactor({"A_TOKEN": "secret-value-1", "B_TOKEN": "secret-value-1-and-more"})
    assert redactor.text("x secret-value-1-and-more y") == "x [redacted:B_TOKEN] y"


def test_empty_redactor_changes_nothing() -> None:
    assert Redactor({}).data(b"anything at all") == b"anything at all"


SECRET = CANARIES["GITHUB_TOKEN"]


def test_value_masks_strings_and_keys_so_no_encoding_carries_the_secret() -> None:
    redactor = Redactor({"GITHUB_TOKEN": SECRET})
    node = f"tests/test_a.py::test_x[{SECRET}]"
    data = {"executed": [node], "outcomes": {node: "passed"}, "n": 3, "ok": True, "x": None}
    masked = redactor.value(data)
    node_masked = "tests/test_a.py::test_x[[redacted:GITHUB_TOKEN]]"
    assert masked == {
        "executed": [node_masked],
        "outcomes": {node_masked: "passed"},
        "n": 3,
        "ok": True,
        "x": None,
    }
    assert data["executed"] == [node]  # a copy: the input is not changed
    for encoded in (json.dumps(masked), json.dumps(masked, ensure_ascii=False), repr(masked)):
        assert TOKENS["GITHUB_TOKEN"] not in encoded


def test_json_document_masks_values_and_encodes_like_the_runner() -> None:
    redactor = Redactor({"GITHUB_TOKEN": SECRET})
    doc = {"label": "box", "collected": [f"t[{SECRET}]"], "tree": {"written": [f"out-{SECRET}"]}}
    raw = json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=False).encode() + b"\n"
    masked = redactor.json_document(raw)
    assert TOKENS["GITHUB_TOKEN"].encode() not in masked
    assert json.loads(masked) == {
        "label": "box",
        "collected": ["t[[redacted:GITHUB_TOKEN]]"],
        "tree": {"written": ["out-[redacted:GITHUB_TOKEN]"]},
    }
    assert masked.endswith(b"]\n }\n}\n")  # sorted keys, indent 1, one trailing newline
    clean = json.dumps({"label": "box"}).encode()
    assert redactor.json_document(clean) is clean  # nothing secret: the bytes stay as they are
    broken = b'{"truncated": "' + SECRET.encode()
    assert redactor.json_document(broken) == b'{"truncated": "[redacted:GITHUB_TOKEN]'
    assert Redactor({}).json_document(raw) is raw


def test_text_round_trips_strings_that_are_not_valid_utf8() -> None:
    redactor = Redactor({"A_TOKEN": "secret-value-1"})
    # A lone surrogate (JSON may spell one) and an undecodable byte kept by surrogateescape.
    assert redactor.text("\ud800 secret-value-1") == "\ud800 [redacted:A_TOKEN]"
    assert redactor.text("\udcff secret-value-1") == "\udcff [redacted:A_TOKEN]"
    doc = redactor.json_document(b'{"a": "\\ud800 secret-value-1"}')
    doc.decode("utf-8")  # still valid UTF-8, so a strict decoder can read the stored copy
    assert json.loads(doc) == {"a": "\ud800 [redacted:A_TOKEN]"}


def test_pytest_escaped_parametrize_ids_are_masked() -> None:
    # pytest writes a parametrize value as an id with non-printable and non-ASCII escaped.
    redactor = Redactor({"GITHUB_TOKEN": SECRET})
    escaped = SECRET.encode("unicode_escape").decode("ascii")
    assert escaped != SECRET
    assert redactor.text(f"test_x[{escaped}]") == "test_x[[redacted:GITHUB_TOKEN]]"


LEAKY_TEST = """\
import base64, json, os, pathlib, urllib.parse

import pytest

NAMES = {names!r}
# The tests' environment is an allow-list (rule 6's first layer): the secrets reach them only
# through a file they can read, which is what the masking (the second layer) is for.
SECRETS = json.loads(pathlib.Path(__file__).with_name("canaries.json").read_text())
FIRST = SECRETS.get(NAMES[0], "absent")


# The id is the secret itself (escaping is off in pyproject.toml): it reaches the receipt's
# node ids, the drift matrix and diff, and every report.
@pytest.mark.parametrize("v", [1], ids=[FIRST])
def test_id_is_the_secret(v):
    assert v == 1


def test_writes_a_file_named_after_the_secret():
    # A file name reaches the receipt's tree lists and the Clean tree gate (JUnit too).
    pathlib.Path("out-" + FIRST.replace("/", "_")).write_text("x")


def test_dumps_the_environment():
    for name in NAMES:
        value = SECRETS.get(name, "")
        raw = value.encode()
        print(name, value, json.dumps(value), json.dumps(value, ensure_ascii=False), repr(value),
              raw.hex(), raw.hex().upper(), base64.b64encode(raw).decode(),
              base64.urlsafe_b64encode(raw).decode(), urllib.parse.quote(value, safe=""))
    print(dict(os.environ))
    assert False
"""
NO_ID_ESCAPING = """\
[tool.pytest.ini_options]
disable_test_id_escaping_and_forfeit_all_rights_to_community_support = true
"""


def _run_env(tmp_path: Path, secrets: dict[str, str], **extra: str) -> dict[str, str]:
    """This environment plus the secrets, with the checkout's packages and a private cache."""
    env = dict(os.environ, **secrets, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "runner"), str(ROOT / "coordinator")])
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


def _run_argv(repo: Path, out: Path, run_id: str, *extra: str) -> list[str]:
    """`charpin-remote run` on the local and clean boxes of this machine."""
    argv = [sys.executable, "-m", "charpin_coordinator", "run", "--repo", str(repo)]
    argv += ["--hosts", "local,clean", "--out", str(out), "--run-id", run_id, "--timeout", "120"]
    return [*argv, *extra]


def _on_terminal(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, bytes]:
    """Run argv with stdout and stderr on a pseudo-terminal (rich tables, live progress)."""
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    finally:
        os.close(slave)
    chunks: list[bytes] = []
    ends = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, ends - time.monotonic()))
            if not ready:
                proc.kill()
                proc.wait()
                raise AssertionError(f"no end of output after {timeout}s: {b''.join(chunks)!r}")
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
    return proc.wait(timeout=60), b"".join(chunks)


@pytest.mark.slow
def test_run_keeps_no_secret_anywhere(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {
            "pyproject.toml": NO_ID_ESCAPING,
            "tests/test_leak.py": LEAKY_TEST.format(names=sorted(CANARIES)),
            "tests/canaries.json": json.dumps(CANARIES),
        },
    )
    out = tmp_path / "runs"
    env = _run_env(tmp_path, CANARIES, TERM="xterm-256color")

    def argv(run_id: str, *extra: str) -> list[str]:
        return _run_argv(repo, out, run_id, *extra)

    markdown, junit = tmp_path / "drift.md", tmp_path / "drift.xml"
    as_json = subprocess.run(
        argv("json", "--json", "--junit", str(junit), "--markdown", str(markdown)),
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert as_json.returncode & 1, as_json.stderr.decode()  # the leaky test failed, as planted
    as_text = subprocess.run(argv("text"), env=env, capture_output=True, timeout=300, check=False)
    assert as_text.returncode & 1, as_text.stderr.decode()
    code, terminal = _on_terminal(argv("tty"), env, timeout=300)
    assert code & 1, terminal.decode(errors="replace")
    assert b"\x1b[" in terminal  # rich drew its tables: the terminal path really ran

    # The secret did reach every structured artifact, masked before encoding.
    first = sorted(CANARIES)[0]  # the secret the leaky test puts in an id and a file name
    mask = f"[redacted:{first}]".encode()
    local = out / "json" / "local"
    assert mask in (local / "stdout.log").read_bytes()
    receipt = (local / "receipt.json").read_bytes()
    assert b"::test_id_is_the_secret[" + mask + b"]" in receipt
    load_receipt(receipt, source="stored receipt")  # the masked re-encoding is still valid
    assert mask in (out / "json" / "drift.json").read_bytes()
    assert mask in as_json.stdout
    assert mask in junit.read_bytes()
    in_markdown = "\\[redacted:" + first.replace("_", "\\_") + "\\]"  # escaped as text
    assert in_markdown.encode() in markdown.read_bytes()

    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) >= 27  # three runs x (drift.json, drift.md, two boxes x four files)
    blobs = {str(p): p.read_bytes() for p in [*files, markdown, junit]}
    blobs["--json stdout"], blobs["--json stderr"] = as_json.stdout, as_json.stderr
    blobs["text stdout"], blobs["text stderr"] = as_text.stdout, as_text.stderr
    blobs["terminal"] = terminal
    leaks = [
        f"{name} ({kind}) in {where}"
        for name, value in CANARIES.items()
        for kind, form in _leak_forms(value, TOKENS[name]).items()
        for where, blob in blobs.items()
        if form in blob
    ]
    assert leaks == []


COLLIDING_TEST = """\
import os

import pytest

SECRET = os.environ.get("GITHUB_TOKEN", "absent")


# Masked, the first id becomes the second: the masked receipt repeats a node id and is refused,
# so the report is built from the receipt as it came and must be masked value by value itself.
@pytest.mark.parametrize("v", [1, 2], ids=[SECRET, "[redacted:GITHUB_TOKEN]"])
def test_collides(v):
    assert v
"""


@pytest.mark.slow
def test_receipt_that_masking_makes_invalid_still_leaks_nothing(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {"pyproject.toml": NO_ID_ESCAPING, "tests/test_collide.py": COLLIDING_TEST},
    )
    out, markdown, junit = tmp_path / "runs", tmp_path / "drift.md", tmp_path / "drift.xml"
    argv = _run_argv(repo, out, "r1", "--json", "--markdown", str(markdown), "--junit", str(junit))
    env = _run_env(tmp_path, {"GITHUB_TOKEN": SECRET})
    done = subprocess.run(argv, env=env, capture_output=True, timeout=300, check=False)
    report = json.loads(done.stdout)
    assert [box["label"] for box in report["boxes"]] == ["local", "clean"], done.stderr.decode()
    stored = (out / "r1" / "local" / "receipt.json").read_bytes()
    assert stored.count(b"::test_collides[[redacted:GITHUB_TOKEN]]") >= 2  # the collision
    blobs = {str(p): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    blobs.update({"markdown": markdown.read_bytes(), "junit": junit.read_bytes()})
    blobs["stdout"], blobs["stderr"] = done.stdout, done.stderr
    leaks = [
        f"{kind} in {where}"
        for kind, form in _leak_forms(SECRET, TOKENS["GITHUB_TOKEN"]).items()
        for where, blob in blobs.items()
        if form in blob
    ]
    assert leaks == []


def test_a_secret_is_masked_as_the_reports_show_it() -> None:
    """The reports' own escaping (\\xNN for controls, \\uNNNN for direction marks) is a form."""
    from charpin_coordinator.reports.escape import shown

    secret = "ab\tcd\u202eefgh"
    redactor = Redactor({"A_TOKEN": secret})
    assert shown(secret) == "ab\\x09cd\\u202eefgh"
    assert redactor.data(f"id[{shown(secret)}]".encode()) == b"id[[redacted:A_TOKEN]]"


def test_json_document_without_escapes_or_any_form_is_not_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a backslash every decoded string is a slice of the UTF-8 bytes, so no form in the
    bytes means no form in any string: a 100,000-test receipt costs one scan per form."""
    import charpin_coordinator.redact as redact

    redactor = Redactor({"GITHUB_TOKEN": SECRET})
    clean = json.dumps({"ids": [f"t.py::test_{n}" for n in range(100)]}).encode()

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("decoded a document that cannot hold a secret")

    monkeypatch.setattr(redact.json, "loads", refuse)
    assert redactor.json_document(clean) is clean


@pytest.mark.parametrize(
    "doc",
    [
        # A letter of the value as a \uXXXX escape: no form of it is in the bytes.
        b'{"a": "x plain-se\\u0063ret-value"}',
        # UTF-16: JSON readers accept it, and no UTF-8 form is in the bytes.
        json.dumps({"a": "x plain-secret-value"}).encode("utf-16-le"),
    ],
    ids=["escaped", "utf-16"],
)
def test_json_document_still_decodes_what_bytes_alone_cannot_clear(doc: bytes) -> None:
    redactor = Redactor({"A_TOKEN": "plain-secret-value"})
    assert b"plain-secret-value" not in doc
    assert json.loads(redactor.json_document(doc)) == {"a": "x [redacted:A_TOKEN]"}


def test_a_secret_is_masked_as_the_runner_spells_a_file_name() -> None:
    """A receipt's file names show an undecodable byte as \\xNN (charpin_runner printable)."""
    secret = "ab\\cd\udcffefgh"  # a backslash and a byte that is not UTF-8
    redactor = Redactor({"A_TOKEN": secret})
    assert redactor.text("out-ab\\cd\\xffefgh") == "out-[redacted:A_TOKEN]"


def test_a_secret_that_is_not_utf8_is_masked_not_a_crash() -> None:
    """os.environ holds an undecodable byte as a surrogate; `run` builds its Redactor from it."""
    redactor = Redactor.from_env({"A_TOKEN": "secret-\udcff-value"})
    assert redactor.data(b"x secret-\xff-value") == b"x [redacted:A_TOKEN]"
    assert redactor.data(b"x secret-%FF-value") == b"x [redacted:A_TOKEN]"

"""Rule 6: nothing secret leaves in any form.

Seen in the field: the 8 MiB log cap cut a token two bytes in and kept the rest unmasked; a
token printed as an HTTP Basic header, in base32, reversed or spaced out was kept. The tests no
longer get the variable at all (test_rule6_env_allowlist.py); this corpus tests the second
layer: a value of a credential-looking variable of this machine that reaches the tests anyway
(here from a file) is masked in every artefact the run writes: logs, receipts, drift.json,
drift.md, drift.html and JUnit. They run on `local`.
"""

from __future__ import annotations

import base64
import urllib.parse
from pathlib import Path

import pytest

from tests.hostile.harness import SAY_TOML, repo_with, run

TOKEN = "ghp_9fK2qLm7Xv3RtYw8Zc1Nb5Hd0Jp4Sa6Ue"
FORMS = {
    "plain": TOKEN,
    "basic-auth": base64.b64encode(f"deploy:{TOKEN}".encode()).decode(),
    "basic-auth-other-user": base64.b64encode(f"ci-bot:{TOKEN}".encode()).decode(),
    "base32": base64.b32encode(TOKEN.encode()).decode(),
    "base32-in-blob": base64.b32encode(f"token={TOKEN}\n".encode()).decode(),
    "reversed": TOKEN[::-1],
    "spaced": " ".join(TOKEN),
    "url-encoded": urllib.parse.quote(f"{TOKEN}/x", safe=""),
}
PRINTER = """
import base64, os, urllib.parse
import pytest

# The tests never get the variable (test_rule6_env_allowlist.py): this corpus tests the second
# layer, the masking of what reaches an artefact anyway, so the token comes from a file.
TOKEN = open(os.path.join(os.path.dirname(__file__), "token.txt")).read().strip()
FORMS = [
    base64.b64encode(("deploy:" + TOKEN).encode()).decode(),
    base64.b64encode(("ci-bot:" + TOKEN).encode()).decode(),
    base64.b32encode(TOKEN.encode()).decode(),
    base64.b32encode(("token=" + TOKEN + chr(10)).encode()).decode(),
    TOKEN[::-1],
    " ".join(TOKEN),
    urllib.parse.quote(TOKEN + "/x", safe=""),
]


@pytest.mark.parametrize("form", FORMS)
def test_leaks(form):
    print("Authorization: Basic " + form)
    assert form == "", "leaked " + form
"""


def _leaks(folder: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for name, form in FORMS.items():
            core = form[3:-3] if name.startswith(("basic", "base32")) else form
            if core.encode() in data:
                found.setdefault(name, []).append(path.name)
    return found


@pytest.mark.slow
def test_derived_forms_of_a_secret_reach_no_artefact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEPLOY_TOKEN", TOKEN)
    repo = repo_with(
        tmp_path / "repo", {"tests/test_leak.py": PRINTER, "tests/token.txt": TOKEN}, toml=SAY_TOML
    )
    outputs = ["--markdown", str(tmp_path / "runs" / "drift.md")]
    outputs += ["--junit", str(tmp_path / "runs" / "drift.xml")]
    _, report, _ = run(repo, "local", *outputs)
    assert report["boxes"][0]["failing"], report["boxes"]  # the forms are in the ids and logs
    assert _leaks(tmp_path / "runs") == {}


@pytest.mark.slow
def test_a_log_cut_at_its_cap_leaves_no_half_of_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past 8 MiB a log comes back as its end: wherever the cut falls, it must not leave the
    second half of a token readable at the start of what is kept."""
    monkeypatch.setenv("DEPLOY_TOKEN", TOKEN)
    flood = (
        "import os, sys\n\n\ndef test_floods():\n"
        "    token = open(os.path.join(os.path.dirname(__file__), 'token.txt')).read().strip()\n"
        "    line = ' '.join([token] * 64) + ' '\n"
        "    for _ in range((9 << 20) // len(line)):\n"
        "        sys.stdout.write(line)\n"
        "    sys.stdout.write(chr(10))\n"
    )
    repo = repo_with(
        tmp_path / "repo", {"tests/test_flood.py": flood, "tests/token.txt": TOKEN}, toml=SAY_TOML
    )
    _, _, folder = run(repo, "local")
    log = (folder / "local" / "stdout.log").read_bytes()
    note, _, kept = log.partition(b"\n")
    assert b"is over" in note, note[:200]
    for size in range(4, len(TOKEN)):
        assert not kept.startswith(TOKEN[-size:].encode()), kept[:80]
    assert TOKEN.encode() not in log
    assert _leaks(folder) == {}

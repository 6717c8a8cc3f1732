"""Normalisation rules are anchored at path boundaries, ordered, counted; a count change is drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from charpin_runner.config import NormRule, default_rules
from charpin_runner.errors import ConfigError
from charpin_runner.pins.normalise import Places, compile_rules, normalise_all
from pins_helpers import Runner, edit, write_pins

PLACES = Places(
    work="/w/sandbox/work", tmp="/w/sandbox/tmp", home="/w/sandbox/home", repo="/tmp/x/repo"
)


def _apply(text: bytes, rules: list[NormRule] | None = None) -> tuple[bytes, dict[str, int]]:
    compiled = compile_rules(rules or default_rules(), PLACES)
    blobs, counts = normalise_all(compiled, [text])
    return blobs[0], counts


@pytest.mark.parametrize(
    ("text", "expected", "hits"),
    [
        (b"/tmp/x/repo/a.py", b"$REPO/a.py", 1),
        (b"in /tmp/x/repo.", b"in $REPO.", 1),
        (b"'/tmp/x/repo'", b"'$REPO'", 1),
        (b"/tmp/x/repository/a.py", b"/tmp/x/repository/a.py", 0),
        (b"/tmp/x/repo.bak", b"/tmp/x/repo.bak", 0),
        (b"/tmp/x/repo-old", b"/tmp/x/repo-old", 0),
        (b"/private/tmp/x/repo/a", b"/private/tmp/x/repo/a", 0),
        (b"/tmp/x/repo:/tmp/x/repo/b", b"$REPO:$REPO/b", 2),
    ],
)
def test_path_rules_are_anchored_at_boundaries(text: bytes, expected: bytes, hits: int) -> None:
    out, counts = _apply(text)
    assert out == expected
    assert counts["repo"] == hits


def test_rules_apply_in_the_listed_order_with_counts() -> None:
    rules = [
        NormRule(name="stamp", kind="timestamp"),
        NormRule(name="ids", kind="regex", pattern=r"id=\d+", replace="id=N"),
        NormRule(name="work", kind="work"),
    ]
    out, counts = _apply(b"2024-01-02T03:04:05Z id=7 id=8 /w/sandbox/work/out\n", rules)
    assert out == b"$TIMESTAMP id=N id=N $WORK/out\n"
    assert counts == {"stamp": 1, "ids": 2, "work": 1}
    # Order matters: a regex listed first sees the raw path.
    first = [NormRule(name="slash", kind="regex", pattern="/w/", replace="W"), *rules[2:]]
    out, counts = _apply(b"/w/sandbox/work\n", first)
    assert out == b"Wsandbox/work\n" and counts == {"slash": 1, "work": 0}


def test_bad_rules_are_refused() -> None:
    with pytest.raises(ConfigError, match="has no pattern"):
        compile_rules([NormRule(name="r", kind="regex")], PLACES)
    with pytest.raises(ConfigError, match="bad regex"):
        compile_rules([NormRule(name="r", kind="regex", pattern="(")], PLACES)
    with pytest.raises(ConfigError, match="repeats"):
        compile_rules([NormRule(name="a", kind="work"), NormRule(name="a", kind="home")], PLACES)


def test_count_change_is_drift_even_when_bytes_match(messy_repo: Path, charpin: Runner) -> None:
    (messy_repo / "where.py").write_text("import os\nprint('cwd', os.getcwd())\n")
    write_pins(messy_repo, [{"id": "where", "argv": ["where.py"]}])
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    golden = json.loads((messy_repo / "pins.jsonl").read_text())
    assert golden["stdout"] == "cwd $WORK\n" and golden["norm_counts"]["work"] == 1
    # Over-redaction in reverse: the program now prints the token itself, so the bytes are the
    # same but nothing was redacted any more.
    edit(messy_repo / "where.py", "os.getcwd()", "'$WORK'")
    code, out, _err = charpin("pins", "check", "--repo", str(messy_repo))
    assert code == 2
    assert "DRIFT where [normalisation-count]" in out
    assert "normalisation rule 'work': 1 hits recorded, 0 now" in out


def test_rules_come_from_pyproject(messy_repo: Path, charpin: Runner) -> None:
    (messy_repo / "pyproject.toml").write_text(
        "[[tool.charpin.pins.normalise]]\nname = 'stamp'\nkind = 'timestamp'\n"
    )
    (messy_repo / "stamp.py").write_text(
        "import datetime\nprint(datetime.datetime.now().isoformat(), 'done')\n"
    )
    write_pins(messy_repo, [{"id": "stamp", "argv": ["stamp.py"]}])
    code, out, err = charpin("pins", "record", "--repo", str(messy_repo))
    assert code == 0, out + err
    golden = json.loads((messy_repo / "pins.jsonl").read_text())
    assert golden["stdout"] == "$TIMESTAMP done\n"
    assert golden["norm_counts"] == {"stamp": 1}


def test_bad_rule_in_pyproject_is_a_config_error(messy_repo: Path, charpin: Runner) -> None:
    (messy_repo / "pyproject.toml").write_text(
        "[[tool.charpin.pins.normalise]]\nname = 'x'\nkind = 'paths'\n"
    )
    code, _out, err = charpin("pins", "check", "--repo", str(messy_repo))
    assert code == 64
    assert "$.tool.charpin.pins.normalise[0].kind" in err

"""Recording refuses unstable programs, silent overwrites and CI updates; updates say what moved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pins_helpers import Runner, edit, write_pins


@pytest.mark.parametrize(
    ("what", "perturbation"),
    [
        ("time", "under repeat"),
        ("temp", "under temp-root"),
        ("set", "under PYTHONHASHSEED"),
    ],
)
def test_unstable_program_is_refused_naming_the_perturbation(
    messy_repo: Path, charpin: Runner, what: str, perturbation: str
) -> None:
    write_pins(messy_repo, [])
    code, out, err = charpin(
        "pins", "record", "--repo", str(messy_repo), "--id", f"u-{what}", "--", "unstable.py", what
    )
    assert code == 2, out + err
    assert f"pin u-{what} is unstable {perturbation}" in err
    assert "stdout byte" in err
    assert "u-" + what not in (messy_repo / "pins.jsonl").read_text()


def test_timezone_dependence_is_named(messy_repo: Path, charpin: Runner) -> None:
    (messy_repo / "tz.py").write_text(
        "import time\nprint(time.strftime('%z', time.localtime(0)))\n"
    )
    code, _out, err = charpin(
        "pins", "record", "--repo", str(messy_repo), "--id", "tz", "--", "tz.py"
    )
    assert code == 2
    assert "pin tz is unstable under TZ:" in err


def test_umask_changes_only_modes_so_the_pin_is_stable(messy_repo: Path, charpin: Runner) -> None:
    code, out, err = charpin("pins", "record", "--repo", str(messy_repo))
    assert code == 0, out + err
    assert "recorded report" in out


def test_record_refuses_to_overwrite_without_update(messy_repo: Path, charpin: Runner) -> None:
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    before = (messy_repo / "pins.jsonl").read_bytes()
    code, _out, err = charpin(
        "pins", "record", "--repo", str(messy_repo), "--id", "legacy", "--", "legacy_sync.py"
    )
    assert code == 64
    assert "already has a golden; pass --update legacy" in err
    code, out, _err = charpin("pins", "record", "--repo", str(messy_repo))
    assert code == 0
    assert "nothing to record" in out
    assert (messy_repo / "pins.jsonl").read_bytes() == before


def test_update_is_refused_when_ci_is_set(
    messy_repo: Path, charpin: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    monkeypatch.setenv("CI", "true")
    code, _out, err = charpin("pins", "record", "--repo", str(messy_repo), "--update", "legacy")
    assert code == 64
    assert "refusing --update while CI is set" in err


def test_update_one_pin_prints_the_category(messy_repo: Path, charpin: Runner) -> None:
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    edit(messy_repo / "export_invoices.py", '"processed %d customers"', '"done: %d customers"')
    code, out, err = charpin("pins", "record", "--repo", str(messy_repo), "--update", "inv-usd")
    assert code == 0, err
    assert "updated inv-usd: stderr only" in out
    # What changed, old golden against new (#10 item 13).
    assert "  --- golden/stderr" in out
    assert "  -processed 2 customers" in out and "  +done: 2 customers" in out
    assert "inv-exempt" not in out
    lines = [json.loads(x) for x in (messy_repo / "pins.jsonl").read_text().splitlines()]
    by_id = {x["id"]: x for x in lines}
    assert "done: 2 customers" in by_id["inv-usd"]["stderr"]
    # The other pin was not re-recorded, so it still holds the old wording and now drifts.
    assert "processed 1 customers" in by_id["inv-exempt"]["stderr"]
    code, out, _err = charpin("pins", "check", "--repo", str(messy_repo))
    assert code == 2
    assert "DRIFT inv-exempt [stderr]" in out
    code, out, _err = charpin("pins", "record", "--repo", str(messy_repo), "--update")
    assert code == 0
    assert "updated inv-exempt: stderr only" in out
    assert "inv-usd: unchanged (the golden already matches)" in out
    assert "updated inv-usd" not in out


def test_update_names_every_category(messy_repo: Path, charpin: Runner) -> None:
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    edit(messy_repo / "make_report.py", "return 0", 'open("out/extra", "w").close()\n    return 5')
    code, out, _err = charpin("pins", "record", "--repo", str(messy_repo), "--update", "report")
    assert code == 0
    assert "updated report: exit code, file set" in out


def test_case_folder_is_recorded_into_goldens(messy_repo: Path, charpin: Runner) -> None:
    write_pins(messy_repo, [])
    case = messy_repo / "cases" / "usd-case"
    case.mkdir(parents=True)
    (case / "target.txt").write_text("export_invoices.py\n")
    (case / "argv.json").write_text('["export_invoices.py", "--tax-exempt"]')
    (case / "env.json").write_text('{"CURRENCY": "USD"}')
    (case / "stdin.bin").write_bytes(b"acme,3.10,2\n")
    code, out, err = charpin("pins", "record", "--repo", str(messy_repo))
    assert code == 0, out + err
    golden = json.loads((messy_repo / "goldens" / "usd-case.json").read_text())
    assert golden["stdout"] == "acme       net=$6.20 tax=$0.00\nTOTAL $6.20\n"
    assert golden["case_format"] == 2
    assert golden["env_read"] == ["CURRENCY", "TAX_RATE"]
    assert charpin("pins", "check", "--repo", str(messy_repo))[0] == 0
    code, _out, err = charpin("pins", "record", "--repo", str(messy_repo), "--update", "nope")
    assert code == 64
    assert "--update nope: no such pin" in err


def test_writes_outside_output_refused_at_record(messy_repo: Path, charpin: Runner) -> None:
    write_pins(messy_repo, [])
    (messy_repo / "leak.py").write_text("open('stray.txt', 'w').write('x')\n")
    code, _out, err = charpin(
        "pins", "record", "--repo", str(messy_repo), "--id", "leak", "--", "leak.py"
    )
    assert code == 2
    assert "writes outside the output folder ($WORK/stray.txt)" in err


def test_non_python_command_target(messy_repo: Path, charpin: Runner) -> None:
    write_pins(messy_repo, [])
    code, out, err = charpin(
        "pins", "record", "--repo", str(messy_repo), "--id", "echo", "--", "printf", "a\\nb"
    )
    assert code == 0, out + err
    line = json.loads((messy_repo / "pins.jsonl").read_text())
    assert line["stdout"] == "a\nb" and line["env_read"] is None
    assert charpin("pins", "check", "--repo", str(messy_repo))[0] == 0


def test_writes_into_the_repository_refused_at_record(messy_repo: Path, charpin: Runner) -> None:
    write_pins(messy_repo, [{"id": "ok", "argv": ["legacy_sync.py", "a"]}])
    (messy_repo / "dirty.py").write_text(
        "import os\nopen(os.path.join(os.path.dirname(__file__), 'cache.txt'), 'w').write('x')\n"
    )
    code, out, err = charpin(
        "pins", "record", "--repo", str(messy_repo), "--id", "dirty", "--", "dirty.py"
    )
    assert code == 2, out + err
    assert "refused: pin dirty writes into the repository (cache.txt;" in err
    lines = [json.loads(x) for x in (messy_repo / "pins.jsonl").read_text().splitlines()]
    # The well-behaved pin is recorded; the writer gets no golden (nor even a pins.jsonl line).
    assert [(x["id"], "exit_code" in x) for x in lines] == [("ok", True)]
    assert (messy_repo / "cache.txt").is_file()

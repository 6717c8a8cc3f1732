"""CLI edges: usage errors exit 64 with one line; the actual-outputs folder is never a foot-gun."""

from __future__ import annotations

from pathlib import Path

import pytest
from pins_helpers import Runner, write_pins


def test_pins_without_subcommand_is_usage(charpin: Runner) -> None:
    code, _out, err = charpin("pins")
    assert code == 64
    assert "choose a subcommand" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--id", "x"], "needs the command after --"),
        (["--", "a.py"], "needs --id NAME"),
        (["--id", "x/y", "--", "a.py"], "not a plain name"),
        (["--id", "x", "--cwd-rel", "../up", "--", "a.py"], "leaves its root"),
        (["--id", "x", "--env", "NOVALUE", "--", "a.py"], "is not KEY=VALUE"),
    ],
)
def test_record_usage_errors(
    messy_repo: Path, charpin: Runner, args: list[str], message: str
) -> None:
    code, _out, err = charpin("pins", "record", "--repo", str(messy_repo), *args)
    assert code == 64
    assert message in err
    assert err.count("\n") == 1


def test_actual_dir_outside_the_repo_is_refused(messy_repo: Path, charpin: Runner) -> None:
    (messy_repo / "pyproject.toml").write_text("[tool.charpin.pins]\nactual_dir = '.'\n")
    code, _out, err = charpin("pins", "check", "--repo", str(messy_repo))
    assert code == 64
    assert "actual_dir" in err
    assert (messy_repo / "export_invoices.py").exists()


def test_foreign_actual_dir_is_not_emptied(messy_repo: Path, charpin: Runner) -> None:
    (messy_repo / "pyproject.toml").write_text("[tool.charpin.pins]\nactual_dir = 'fixtures'\n")
    write_pins(messy_repo, [{"id": "legacy", "argv": ["legacy_sync.py", "a"]}])
    code, _out, err = charpin("pins", "check", "--repo", str(messy_repo))
    assert code == 64
    assert "was not made by charpin" in err
    assert (messy_repo / "fixtures" / "report" / "data" / "sales.csv").exists()


def test_unrecorded_pin_in_check_is_an_error(messy_repo: Path, charpin: Runner) -> None:
    write_pins(messy_repo, [{"id": "legacy", "argv": ["legacy_sync.py", "a"]}])
    code, out, _err = charpin("pins", "check", "--repo", str(messy_repo))
    assert code == 2
    assert "DRIFT legacy [error]" in out
    assert "no golden yet: run `charpin pins record`" in out


def test_missing_script_is_an_error_not_a_crash(messy_repo: Path, charpin: Runner) -> None:
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    (messy_repo / "legacy_sync.py").unlink()
    code, out, err = charpin("pins", "check", "--repo", str(messy_repo))
    assert code == 2
    assert "DRIFT legacy [error]" in out
    assert "script legacy_sync.py not found" in out
    assert "Traceback" not in out + err


def test_nested_output_folder_may_be_created(messy_repo: Path, charpin: Runner) -> None:
    (messy_repo / "pyproject.toml").write_text("[tool.charpin.pins]\noutput = 'build/out'\n")
    (messy_repo / "nested.py").write_text(
        "import os\nos.makedirs('build/out')\nopen('build/out/a.txt', 'w').write('a')\n"
    )
    write_pins(messy_repo, [{"id": "nested", "argv": ["nested.py"]}])
    code, out, err = charpin("pins", "record", "--repo", str(messy_repo))
    assert code == 0, out + err
    assert '"a.txt"' in (messy_repo / "pins.jsonl").read_text()
    (messy_repo / "nested.py").write_text(
        "import os\nos.makedirs('build/out')\nopen('build/out/a.txt', 'w').write('a')\n"
        "open('build/b.txt', 'w').write('b')\n"
    )
    code, out, _err = charpin("pins", "check", "--repo", str(messy_repo))
    assert code == 2
    assert "wrote outside build/out/: $WORK/build/b.txt" in out

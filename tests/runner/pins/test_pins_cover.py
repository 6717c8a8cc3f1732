"""`charpin pins cover` lists lines and branches of the entry points that no pin exercises."""

from __future__ import annotations

from pathlib import Path

import pytest
from pins_helpers import Runner, write_pins

pytest.importorskip("coverage")


def test_cover_lists_the_unexercised_branch(messy_repo: Path, charpin: Runner) -> None:
    write_pins(messy_repo, [{"id": "legacy", "argv": ["legacy_sync.py", "a"]}])
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    code, out, err = charpin("pins", "cover", "--repo", str(messy_repo))
    assert code == 0, out + err
    lines = (messy_repo / "legacy_sync.py").read_text().splitlines()
    nothing = lines.index('        print("nothing to sync", file=sys.stderr)') + 1
    assert "legacy_sync.py: 1 of" in out
    assert f"  lines: {nothing}\n" in out
    assert f"  branch: {nothing - 1} -> {nothing}\n" in out
    # A second pin that takes the other path covers it.
    write_pins(
        messy_repo,
        [
            {"id": "legacy", "argv": ["legacy_sync.py", "a"]},
            {"id": "legacy-empty", "argv": ["legacy_sync.py"]},
        ],
    )
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    code, out, _err = charpin("pins", "cover", "--repo", str(messy_repo))
    assert code == 0
    assert "legacy_sync.py: 0 of" in out
    assert f"branch: {nothing - 1} -> {nothing}" not in out
    # Only the import-without-__main__ exit stays unexercised.
    main_guard = lines.index('if __name__ == "__main__":') + 1
    assert f"  branch: {main_guard} -> exit\n" in out


def test_cover_without_pins_is_a_usage_error(tmp_path: Path, charpin: Runner) -> None:
    code, _out, err = charpin("pins", "cover", "--repo", str(tmp_path))
    assert code == 64
    assert "no pins" in err


def test_cover_reports_an_extra_entry_point_no_pin_runs(messy_repo: Path, charpin: Runner) -> None:
    write_pins(messy_repo, [{"id": "legacy", "argv": ["legacy_sync.py", "a"]}])
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    code, out, _err = charpin(
        "pins", "cover", "--repo", str(messy_repo), "--entry", "make_report.py"
    )
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("make_report.py:"))
    total = int(line.split(" of ")[1].split()[0])
    assert line.startswith(f"make_report.py: {total} of {total} lines")
    code, _out, err = charpin("pins", "cover", "--repo", str(messy_repo), "--entry", "nope.py")
    assert code == 64
    assert "entry point nope.py is not a file" in err


def test_cover_reports_inventoried_entry_points_that_no_pin_runs(
    messy_repo: Path, charpin: Runner
) -> None:
    write_pins(messy_repo, [{"id": "legacy", "argv": ["legacy_sync.py", "a"]}])
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    code, out, err = charpin("pins", "cover", "--repo", str(messy_repo))
    assert code == 0, out + err
    # make_report.py has a __main__ block (the inventory finds it) but no pin runs it.
    total = next(line for line in out.splitlines() if line.startswith("make_report.py: "))
    missing, _, lines = total.split(" lines")[0].removeprefix("make_report.py: ").partition(" of ")
    assert missing == lines != "0"
    code, out, _err = charpin("pins", "cover", "--repo", str(messy_repo), "--pins-only")
    assert code == 0
    assert "make_report.py" not in out

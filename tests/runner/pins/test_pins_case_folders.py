"""Case folders and pins.jsonl pins keep to their own format when re-recorded by id (#11)."""

from __future__ import annotations

import json
from pathlib import Path

from pins_helpers import Runner, write_pins


def test_a_jsonl_pin_is_re_recorded_by_id_not_taken_for_a_case_folder(
    tmp_path: Path, charpin: Runner
) -> None:
    (tmp_path / "app.py").write_text("import sys\nprint(len(sys.argv))\n")
    write_pins(tmp_path, [])
    record = ("pins", "record", "--repo", str(tmp_path), "--id", "app")
    assert charpin(*record, "--", "app.py")[0] == 0
    code, out, err = charpin(*record, "--update", "app", "--", "app.py", "one")
    assert code == 0, out + err
    line = json.loads((tmp_path / "pins.jsonl").read_text())
    assert (line["argv"], line["stdout"]) == (["app.py", "one"], "2\n")
    code, _out, err = charpin(*record, "--update", "app", "--folder", "--", "app.py")
    assert code == 64
    assert "pin app is a pins.jsonl pin (pins.jsonl line 1); pick another id" in err

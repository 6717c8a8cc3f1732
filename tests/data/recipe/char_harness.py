# char_harness.py
from __future__ import annotations

import hashlib
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
GOLDEN = ROOT / "goldens"
CASES = ROOT / "cases"


def _digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def _run_case(case_dir: Path) -> dict[str, Any]:
    stdin_path = case_dir / "stdin.bin"
    argv = json.loads((case_dir / "argv.json").read_text(encoding="utf-8"))
    extra_env = json.loads((case_dir / "env.json").read_text(encoding="utf-8"))
    target = (case_dir / "target.txt").read_text(encoding="utf-8").strip()
    stdin_data = stdin_path.read_bytes() if stdin_path.exists() else b""

    old_argv = sys.argv[:]
    old_env = os.environ.copy()
    old_cwd = Path.cwd()
    try:
        sys.argv = argv
        os.environ.clear()
        os.environ.update(extra_env)
        os.chdir(case_dir / "work")
        ns = runpy.run_path(str(ROOT / target), run_name="__main__")
        return {
            "ok": True,
            "result": ns.get("RESULT"),
            "stdin_sha": _digest(stdin_data),
        }
    except Exception as exc:  # pin the type name, not a traceback
        return {
            "ok": False,
            "error_type": type(exc).__name__,
            "error": str(exc),
            "stdin_sha": _digest(stdin_data),
        }
    finally:
        sys.argv = old_argv
        os.environ.clear()
        os.environ.update(old_env)
        os.chdir(old_cwd)


def main() -> int:
    update = "--update" in sys.argv
    GOLDEN.mkdir(exist_ok=True)
    failed = 0
    for case_dir in sorted(p for p in CASES.iterdir() if p.is_dir()):
        observed = _run_case(case_dir)
        blob = json.dumps(observed, sort_keys=True, default=str).encode()
        golden_path = GOLDEN / f"{case_dir.name}.json"
        if update or not golden_path.exists():
            golden_path.write_bytes(blob)
            print(f"WROTE {golden_path}")
            continue
        expected = golden_path.read_bytes()
        if blob != expected:
            failed += 1
            print(f"DRIFT {case_dir.name}")
            print(f"  expected_sha={_digest(expected)}")
            print(f"  observed_sha={_digest(blob)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

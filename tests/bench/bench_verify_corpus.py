"""Benchmark of verify's judgement: every patch of the corpus (tests/bench/corpus_*.py: honest
refactors, honest behaviour changes, and the cheats of issue #18) through the real CLI,
`charpin-remote verify --patch FILE --hosts clean --json`, each in its own clone of its subject,
scored right / missed / wrong reason / false alarm / error against what a reviewer expects.

Run:  python tests/bench/bench_verify_corpus.py [--code CHECKOUT] [--work DIR] [--jobs N]
      [--only NAME,...] [--subject demo|tabulate|inflection] [--self-check]

--code runs another checkout's charpin (its runner/ and coordinator/ first on PYTHONPATH; the
subjects are built with it too), so one corpus measures two versions: the same command with
--code /path/to/old/checkout and without. Caches and state are the run's own (XDG_CACHE_HOME,
XDG_STATE_HOME under --work). The tabulate (and, without the vendored copy, the inflection)
sdist comes through pip (`pip download`).
--self-check runs no verify: it applies each patch and prints what the patched tree's own
`pytest` and `charpin pins check` say (a cheat is only a cheat when both are green).

Prints a Markdown table and the totals per subject; results.json in --work keeps every row.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from tests.bench.corpus_demo import BEHAVIOUR as DEMO_BEHAVIOUR  # noqa: E402
from tests.bench.corpus_demo import HONEST as DEMO_HONEST  # noqa: E402
from tests.bench.corpus_demo_cheats import CHEATS as DEMO_CHEATS  # noqa: E402
from tests.bench.corpus_inflection import ENTRIES as INFLECTION_ENTRIES  # noqa: E402
from tests.bench.corpus_model import Entry, Scored, git, score  # noqa: E402
from tests.bench.corpus_subjects import (  # noqa: E402
    DEMO,
    INFLECTION,
    TABULATE,
    build_demo,
    build_inflection,
    build_tabulate,
    code_env,
)
from tests.bench.corpus_tabulate import ENTRIES as TABULATE_ENTRIES  # noqa: E402

ENTRIES: list[Entry] = [*DEMO_HONEST, *DEMO_BEHAVIOUR, *DEMO_CHEATS, *TABULATE_ENTRIES,
                       *INFLECTION_ENTRIES]
OUTCOMES = ("right", "missed", "wrong reason", "false alarm", "error")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose charpin runs")
    parser.add_argument("--work", type=Path, help="work folder (default: a new temporary one)")
    parser.add_argument("--sdists", type=Path, help="where the tabulate sdist is kept")
    parser.add_argument("--jobs", type=int, default=1, help="entries verified at once")
    parser.add_argument("--only", default="", help="comma-separated entry names (substrings)")
    parser.add_argument("--subject", choices=(DEMO, TABULATE, INFLECTION), help="one subject only")
    parser.add_argument("--self-check", action="store_true", help="no verify: own pytest + pins")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="charpin-corpus-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    code = args.code.resolve()
    head = _head(code)  # the commit that ran, read before the run (a commit may land meanwhile)
    env = code_env(code)
    env.update(XDG_CACHE_HOME=str(work / "xdg-cache"), XDG_STATE_HOME=str(work / "xdg-state"))
    for name in ("CI", "SSH_AUTH_SOCK", "http_proxy", "https_proxy"):
        env.pop(name, None)
    wanted = [e for e in ENTRIES if not args.subject or e.subject == args.subject]
    if args.only:
        names = args.only.split(",")
        wanted = [e for e in wanted if any(n in e.name for n in names)]
    subjects = _subjects(work, env, {e.subject for e in wanted}, args.sdists or work / "sdists")
    started = time.perf_counter()
    check = _self_check if args.self_check else _verify
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda e: _guarded(check, e, subjects[e.subject], work, env), wanted))
    wall = time.perf_counter() - started
    (work / "results.json").write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
    if args.self_check:
        _print_self_check(rows)
    else:
        _print(rows, code, head, wall)
    print(f"\nwork folder: {work}", file=sys.stderr)
    return 0


def _guarded(check: Any, entry: Entry, subject: Path, work: Path, env: dict[str, str]) -> Any:
    """One entry's row; an entry whose patch cannot be made is an error row, not the end."""
    try:
        row = check(entry, subject, work, env)
    except Exception as exc:
        row = _row(entry, Scored("error", "error", [], f"{type(exc).__name__}: {exc}"), -1, 0.0)
    print(f"{row['entry']}: {row.get('outcome', row.get('green'))}", file=sys.stderr, flush=True)
    return row


def _subjects(work: Path, env: dict[str, str], names: set[str], sdists: Path) -> dict[str, Path]:
    out = {}
    for name in sorted(names):
        dest = work / "subjects" / name
        if not (dest / ".git").is_dir():
            print(f"building the {name} subject ...", file=sys.stderr)
            if name == DEMO:
                build_demo(dest, env)
            elif name == INFLECTION:
                build_inflection(dest, sdists)
            else:
                build_tabulate(dest, env, sdists)
        out[name] = dest
    return out


def _clone(entry: Entry, subject: Path, work: Path) -> Path:
    folder = work / "entries" / entry.name
    if folder.exists():
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    folder.mkdir(parents=True)
    repo = folder / "repo"
    git(folder, "clone", "-q", "--no-local", str(subject), str(repo))
    return repo


def _verify(entry: Entry, subject: Path, work: Path, env: dict[str, str]) -> dict[str, Any]:
    repo = _clone(entry, subject, work)
    patch = repo.parent / "agent.diff"
    patch.write_bytes(entry.patch(repo))
    out = repo.parent / "verify"
    argv = [sys.executable, "-m", "charpin_coordinator", "verify", "--repo", str(repo),
            "--patch", str(patch), "--hosts", "clean", "--json", "--out", str(out),
            "--run-id", "v", "--timeout", "300"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=repo, capture_output=True, timeout=1800, check=False)
    seconds = time.perf_counter() - start
    stderr = done.stderr.decode("utf-8", "replace")
    report = None
    kept = out / "v" / "verify.json"
    if kept.is_file():
        report = json.loads(kept.read_text(encoding="utf-8"))
    scored = score(entry, done.returncode, report, stderr)
    return _row(entry, scored, done.returncode, seconds)


def _row(entry: Entry, scored: Scored, code: int, seconds: float) -> dict[str, Any]:
    return {
        "entry": entry.name,
        "subject": entry.subject,
        "kind": entry.kind,
        "what": entry.what,
        "expected": entry.expect if entry.expect == "ACCEPT" else f"REJECT: {entry.gate}",
        "reason": entry.reason,
        "got": scored.got,
        "outcome": scored.outcome,
        "failed": scored.failed,
        "said": scored.detail,
        "exit": code,
        "seconds": round(seconds, 1),
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _print(rows: list[dict[str, Any]], code: Path, head: str, wall: float) -> None:
    print(f"verify corpus, code {code} ({head}), {len(rows)} entries, {wall:.0f} s\n")
    print("| entry | subject | expected | got | outcome | gates failed | what verify said |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        mark = r["outcome"] if r["outcome"] == "right" else f"**{r['outcome']}**"
        print(
            f"| {r['entry']} | {r['subject']} | {_cell(r['expected'])} | {r['got']} | {mark} "
            f"| {', '.join(r['failed']) or '-'} | {_cell(r['said'])[:160]} |"
        )
    print("\n| subject | entries | " + " | ".join(OUTCOMES) + " |")
    print("|---|---|" + "---|" * len(OUTCOMES))
    for subject in [*sorted({r["subject"] for r in rows}), "all"]:
        mine = [r for r in rows if subject in ("all", r["subject"])]
        counts = [sum(1 for r in mine if r["outcome"] == o) for o in OUTCOMES]
        print(f"| {subject} | {len(mine)} | " + " | ".join(map(str, counts)) + " |")


def _head(code: Path) -> str:
    try:
        return git(code, "rev-parse", "--short", "HEAD")
    except subprocess.CalledProcessError:
        return "?"


def _self_check(entry: Entry, subject: Path, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """The patched tree's own pytest and pins check, as the agent saw them."""
    repo = _clone(entry, subject, work)
    base = _own_checks(repo, env)
    patch = entry.patch(repo)
    applied = subprocess.run(
        ["git", "-C", str(repo), "apply", "--index", "-"], input=patch, capture_output=True, check=False
    )
    if applied.returncode != 0:
        return {"entry": entry.name, "subject": entry.subject, "apply": applied.stderr.decode()}
    after = _own_checks(repo, env)
    new_red = sorted(set(after["red"]) - set(base["red"]))
    return {
        "entry": entry.name,
        "subject": entry.subject,
        "kind": entry.kind,
        "pytest_new_red": new_red,
        "ran": after["ran"],
        "pins": "-" if after["pins"] is None else after["pins"],
        "green": not new_red and after["pins"] in (0, None) and "passed" in after["ran"],
    }


def _own_checks(repo: Path, env: dict[str, str]) -> dict[str, Any]:
    own = dict(env, PYTHONDONTWRITEBYTECODE="1")
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=repo, env=own, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    red = [
        line.split()[1]
        for line in tests.stdout.splitlines()
        if line.startswith(("FAILED ", "ERROR ")) and len(line.split()) > 1
    ]
    pins: int | None = None  # a subject without pins (inflection): its tests are all it has
    if (repo / "pins.jsonl").exists() or (repo / "cases").is_dir():
        pins = subprocess.run(
            [sys.executable, "-m", "charpin_runner", "pins", "check"],
            cwd=repo, env=own, capture_output=True, timeout=900, check=False,
        ).returncode  # fmt: skip
    subprocess.run(["git", "-C", str(repo), "clean", "-qfdx", "-e", ".charpin"], check=False)
    return {"red": red, "ran": _ran(tests.stdout), "pins": pins}


def _ran(stdout: str) -> str:
    """pytest's summary line (`455 passed in 1.2s`), so a row shows the suite really ran."""
    lines = [line for line in stdout.splitlines() if " in " in line and ("passed" in line or "failed" in line)]
    return lines[-1].strip("= ") if lines else "no summary"


def _print_self_check(rows: list[dict[str, Any]]) -> None:
    print("| entry | kind | own pytest | own pytest: new red | pins check exit | green to the agent |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "apply" in r or "pytest_new_red" not in r:
            r.setdefault("apply", r.get("said", ""))
            print(f"| {r['entry']} | - | - | does not apply: {_cell(r['apply'])[:120]} | - | - |")
            continue
        red = ", ".join(r["pytest_new_red"]) or "-"
        print(
            f"| {r['entry']} | {r['kind']} | {r['ran']} | {_cell(red)[:160]} | {r['pins']} "
            f"| {r['green']} |"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    raise SystemExit(main())

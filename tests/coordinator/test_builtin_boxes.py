"""`charpin-remote run` with the built-in boxes (local + clean): real repos, real runner, no SSH."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.config import load_config
from charpin_coordinator.remote import snapshot
from charpin_coordinator.remote.boxrun import BoxOutcome, BoxTarget, RunPlan, run_box
from charpin_coordinator.remote.bundle import runner_bundle
from charpin_coordinator.remote.transport import LocalChannel, LocalTransport

from tests.conftest import git, make_repo

RUNNER_PATH = str(Path(__file__).resolve().parents[2] / "runner")


@pytest.fixture(autouse=True)
def _runner_importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The local box runs `python -m charpin_runner`; in a source checkout it is not installed.
    monkeypatch.setenv("PYTHONPATH", RUNNER_PATH)
    # The clean box keeps its cache under XDG_CACHE_HOME: never the developer's real home.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def _run(repo: Path, *extra: str) -> tuple[int, dict[str, object], Path]:
    out = repo.parent / "runs"
    code = main(
        [
            "run",
            "--repo",
            str(repo),
            "--out",
            str(out),
            "--json",
            "--run-id",
            "r1",
            "--timeout",
            "120",
            *extra,
        ]
    )
    folder = out / "r1"
    return code, json.loads((folder / "drift.json").read_text()), folder


def _gate(report: dict[str, object], gate: str, box: str) -> str:
    for row in report["gates"]:  # type: ignore[attr-defined]
        if row["gate"] == gate and row["box"] == box:
            return str(row["status"])
    raise AssertionError(f"no {gate} gate for {box}")


def test_local_and_clean_catch_an_uncommitted_stale_fixture(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (git_repo / "tests/fixtures/rates.json").write_text('{"vat": "0.21"}\n')
    code, report, folder = _run(git_repo)
    assert code & 2 and code & 1 and not code & 4
    assert [b["label"] for b in report["boxes"]] == ["local", "clean"]  # type: ignore[attr-defined]
    assert _gate(report, "Fixture integrity", "local") == "FAIL"
    assert _gate(report, "Clean tree", "local") == "FAIL"
    assert _gate(report, "Clean tree", "clean") == "PASS"
    dims = {d["name"]: d for d in report["dimensions"]}  # type: ignore[attr-defined]
    assert "tests/fixtures/rates.json" in json.dumps(dims["fixtures"])
    rows = {r["item"]: r["values"] for r in dims["outcomes"]["matrix"]}
    assert rows["tests/test_rates.py::test_vat"] == {"local": "failed", "clean": "passed"}
    for box in ("local", "clean"):
        assert {p.name for p in (folder / box).iterdir()} == {
            "receipt.json",
            "stdout.log",
            "stderr.log",
            "box.json",
        }
    clean = json.loads((folder / "clean" / "box.json").read_text())
    assert clean["channels"] == 1  # one agent session carried the whole pipeline
    local = json.loads((folder / "local" / "box.json").read_text())
    assert local["channels"] == 1 and local["label"] == "local"
    assert json.loads(capsys.readouterr().out)["exit_code"] == code


def test_garbage_receipt_is_refused_while_the_other_box_reports(
    git_repo: Path, tmp_path: Path
) -> None:
    liar = tmp_path / "liar-python"
    liar.write_text(
        "#!/bin/sh\n"
        'case "$*" in *" receipt "*)\n'
        '  prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        '  printf \'{"schema_version": 1, "run_id": 7}\' > "$out"; exit 0;;\n'
        "esac\n"
        f'exec {sys.executable} "$@"\n'
    )
    liar.chmod(0o755)
    (git_repo / "pyproject.toml").write_text(f'[tool.charpin.hosts.clean]\npython = "{liar}"\n')
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "liar")
    code, report, folder = _run(git_repo)
    assert code & 8 and code & 4
    missing: dict[str, str] = report["not_evaluated"][0]  # type: ignore[index]
    assert missing["label"] == "clean" and missing["kind"] == "receipt-refused"
    assert [b["label"] for b in report["boxes"]] == ["local"]  # type: ignore[attr-defined]
    assert (folder / "clean" / "receipt.json").read_bytes().startswith(b'{"schema_version"')


@pytest.mark.slow
def test_failing_setup_is_not_evaluated_with_its_output(git_repo: Path) -> None:
    (git_repo / "pyproject.toml").write_text(
        '[tool.charpin]\nsetup = ["echo resolver exploded >&2; exit 3"]\n'
    )
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "setup")
    code, report, _ = _run(git_repo, "--hosts", "clean")
    missing: dict[str, str] = report["not_evaluated"][0]  # type: ignore[index]
    assert missing["kind"] == "setup-failed" and "resolver exploded" in missing["reason"]
    assert code & 4


@pytest.mark.slow
def test_venv_is_cached_by_dependency_files(git_repo: Path, tmp_path: Path) -> None:
    count = tmp_path / "setup-ran"
    # Give the fresh venv this interpreter's pytest through a .pth file: no network needed.
    pth = (
        "import site; open(site.getsitepackages()[0] + '/outer.pth', 'w')"
        f".write({site.getsitepackages()[0]!r})"
    )
    setup = [f"echo ran >> {count}", f'python -c "{pth}"']
    snap = snapshot.resolve(git_repo, "HEAD")
    table = load_config(git_repo, rev=snap.commit).table
    root = tmp_path / "box"
    root.mkdir()

    def once(run_id: str) -> None:
        plan = RunPlan(
            run_id=run_id,
            snap=snap,
            config_table=table,
            setup=setup,
            timeout=120,
            keep=False,
            runner=runner_bundle(),
            repo_key="0123456789abcdef",
            # The counter lives outside the venv, where the setup sandbox cannot write (rule 2).
            sandbox="off",
        )
        target = BoxTarget(
            label="b",
            python=sys.executable,
            connect=lambda: LocalTransport("b", root, base_env=dict(os.environ)),
        )
        outcome = run_box(target, plan, lambda _b, _p: None, threading.Event())
        assert outcome.not_evaluated is None, outcome.not_evaluated
        assert outcome.receipt is not None and outcome.receipt.exit.interpretation == "ok"

    once("first")
    once("second")
    assert count.read_text() == "ran\n"
    assert not list((root / ".cache/charpin/runs").iterdir())  # run folders removed


@pytest.mark.slow
def test_local_with_another_commit_warns_and_still_runs(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = git(git_repo, "rev-parse", "HEAD")
    (git_repo / "NOTES").write_text("later\n")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "later")
    code, report, _ = _run(git_repo, "--commit", old)
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert len(warnings) == 1
    assert "local runs the working tree at HEAD" in warnings[0] and old[:12] in warnings[0]
    assert "Identity" in warnings[0]
    assert _gate(report, "Identity", "local") == "FAIL"  # still run: the gate shows it
    assert _gate(report, "Identity", "clean") == "PASS"
    assert code & 2  # a blocking gate


def test_local_at_head_by_name_does_not_warn(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = git(git_repo, "rev-parse", "HEAD")
    _run(git_repo, "--commit", head, "--hosts", "local")
    assert "warning" not in capsys.readouterr().err


def test_a_clean_box_whose_python_hangs_is_killed_at_its_deadline(tmp_path: Path) -> None:
    # Same session code as an SSH box: closing waits for what is left of the deadline, then kills.
    python, pid_file = tmp_path / "hanging-python", tmp_path / "python.pid"
    python.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 3600\n")
    python.chmod(0o755)
    repo = make_repo(
        tmp_path / "repo",
        {
            "tests/test_a.py": "def test_a():\n    pass\n",
            "pyproject.toml": f'[tool.charpin.hosts.clean]\npython = "{python}"\n',
        },
    )
    started = time.monotonic()
    code, report, _ = _run(repo, "--hosts", "clean", "--timeout", "5")
    wall = time.monotonic() - started
    [missing] = report["not_evaluated"]  # type: ignore[misc]
    assert missing["kind"] == "timeout" and "did not answer within" in missing["reason"]
    assert code & 4
    assert wall < 8.5, f"took {wall:.1f}s for a 5s deadline"
    assert not Path(f"/proc/{pid_file.read_text().strip()}").exists(), "the python still runs"


def _commit(repo: Path) -> None:
    """A host's python is taken from committed configuration only (rule 1)."""
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "config")


def _bare_python() -> str:
    bare = "/usr/bin/python3"
    if (
        not Path(bare).exists()
        or subprocess.run(
            [bare, "-c", "import pytest"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        pytest.skip(f"needs a {bare} without pytest")
    return bare


def test_hosts_check_defaults_to_local_and_clean(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hosts", "check", "--repo", str(git_repo)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert {line.split("]")[0] + "]" for line in lines} == {"[local]", "[clean]"}
    assert "[clean] ok  pytest: pytest imports (no setup commands for this box)" in lines


def test_hosts_check_refuses_a_python_without_pytest_when_no_setup(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = _bare_python()
    (git_repo / "pyproject.toml").write_text(f'[tool.charpin.hosts.clean]\npython = "{bare}"\n')
    _commit(git_repo)
    assert main(["hosts", "check", "--repo", str(git_repo), "--hosts", "clean"]) == 4
    [bad] = [ln for ln in capsys.readouterr().out.splitlines() if " BAD " in ln]
    assert bad.startswith(f"[clean] BAD pytest: {bare} on clean cannot import pytest")
    assert 'add setup = ["pip install pytest"]' in bad and "or install pytest" in bad


def test_hosts_check_does_not_ask_for_pytest_when_setup_installs_it(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = _bare_python()
    (git_repo / "pyproject.toml").write_text(
        f'[tool.charpin]\nsetup = ["pip install pytest"]\n'
        f'[tool.charpin.hosts.clean]\npython = "{bare}"\n'
    )
    _commit(git_repo)
    assert main(["hosts", "check", "--repo", str(git_repo), "--hosts", "clean"]) == 0
    assert "] ok  pytest:" not in (out := capsys.readouterr().out) and "BAD pytest" not in out


NO_SSH_STACK = """\
import sys
from charpin_coordinator.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("paramiko", "fabric", "invoke"))
print("HEAVY", heavy, "CODE", code)
"""


@pytest.mark.parametrize("command", [["run", "--hosts", "local,clean", "-q"], ["hosts", "check"]])
def test_builtin_boxes_never_import_the_ssh_stack(git_repo: Path, command: list[str]) -> None:
    argv = [sys.executable, "-c", NO_SSH_STACK, *command, "--repo", str(git_repo)]
    if command[0] == "run":
        argv += ["--out", str(git_repo.parent / "runs"), "--json"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [RUNNER_PATH, str(Path(RUNNER_PATH).parent / "coordinator")]
    )
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("HEAVY")]
    assert line == "HEAVY [] CODE 0", done.stderr


SETUP_SCRIPT = """\
import site, sys
open(sys.argv[1], "a").write("ran\\n")
# Give the fresh venv the coordinator's pytest through a .pth file: no network needed.
open(site.getsitepackages()[0] + "/outer.pth", "w").write(sys.argv[2])
"""


@pytest.mark.slow
def test_clean_box_keeps_its_venv_between_runs(git_repo: Path, tmp_path: Path) -> None:
    count = tmp_path / "setup-ran"
    (git_repo / "venv_setup.py").write_text(SETUP_SCRIPT)
    command = f"python venv_setup.py {count} {site.getsitepackages()[0]}"
    (git_repo / "pyproject.toml").write_text(f"[tool.charpin]\nsetup = [{json.dumps(command)}]\n")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "setup")
    out = tmp_path / "runs"
    for run_id in ("first", "second"):
        argv = ["run", "--repo", str(git_repo), "--out", str(out), "--run-id", run_id]
        # --sandbox off: the counter lives outside the venv, where setup cannot write (rule 2).
        code = main([*argv, "--hosts", "clean", "--json", "--timeout", "120", "--sandbox", "off"])
        assert code == 16  # one box is a vacuous comparison, and nothing else went wrong
        box = json.loads((out / run_id / "clean" / "box.json").read_text())
        assert box["status"] == "evaluated", box
    assert count.read_text() == "ran\n"  # setup ran once; the second run reused the venv
    cache = tmp_path / "xdg-cache" / "charpin" / "clean-box" / ".cache" / "charpin"
    assert len(list((cache / "venvs").glob("*/.ok"))) == 1
    assert not list((cache / "runs").iterdir())  # each run's folder is still removed


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--jobs", "0"], "--jobs 0"),
        (["--timeout", "-3"], "--timeout"),
        (["--commit", "no-such-rev"], "no-such-rev"),
        (["--hosts", "local,,clean"], "empty name"),
        (["--hosts", "nope"], "unknown host 'nope'"),
        (["--run-id", "../up"], "--run-id"),
        (["--baseline", "ci"], "--baseline 'ci'"),
    ],
)
def test_bad_values_are_one_line_and_exit_64(
    git_repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    needle: str,
) -> None:
    empty = tmp_path / "ssh_config"
    empty.write_text("")
    code = main(["run", "--repo", str(git_repo), "--ssh-config", str(empty), *args])
    err = capsys.readouterr().err.strip()
    assert code == 64
    assert needle in err and len(err.splitlines()) == 1
    assert not (git_repo / ".charpin").exists()


def test_box_reporting_another_tree_is_a_snapshot_integrity_failure(
    git_repo: Path, tmp_path: Path
) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "git").write_text(
        "#!/bin/sh\n"
        'for a; do [ "$a" = "HEAD^{tree}" ] && { echo 0000000000000000000000000000000000000000;'
        " exit 0; }; done\n"
        f'exec {shutil.which("git")} "$@"\n'
    )
    (fake / "git").chmod(0o755)
    snap = snapshot.resolve(git_repo, "HEAD")
    plan = RunPlan(
        run_id="r",
        snap=snap,
        config_table={},
        setup=[],
        timeout=60,
        keep=False,
        runner=runner_bundle(),
        repo_key="0123456789abcdef",
    )
    root = tmp_path / "box"
    root.mkdir()
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    target = BoxTarget(
        label="liar",
        python=sys.executable,
        connect=lambda: LocalTransport("liar", root, base_env=env),
    )
    outcome = run_box(target, plan, lambda _b, _p: None, threading.Event())
    assert outcome.not_evaluated is not None
    assert outcome.not_evaluated.kind == "snapshot-integrity"
    assert snap.tree in outcome.not_evaluated.reason
    assert not list((root / ".cache/charpin/runs").iterdir())


def test_box_python_without_pytest_and_no_setup_names_the_fix(git_repo: Path) -> None:
    bare = _bare_python()
    (git_repo / "pyproject.toml").write_text(f'[tool.charpin.hosts.clean]\npython = "{bare}"\n')
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "bare python")
    code, report, _ = _run(git_repo, "--hosts", "local,clean")
    missing: dict[str, str] = report["not_evaluated"][0]  # type: ignore[index]
    assert missing["kind"] == "setup-failed"
    assert 'setup = ["pip install pytest"]' in missing["reason"]
    assert code & 4


def _run_on_folder_box(
    repo: Path, box: LocalTransport, run_id: str, env: dict[str, str] | None = None
) -> BoxOutcome:
    """Ship HEAD of repo to a LocalTransport box and run it there, as `run` would."""
    snap = snapshot.resolve(repo, "HEAD")
    plan = RunPlan(
        run_id=run_id,
        snap=snap,
        config_table=load_config(repo, rev=snap.commit).table,
        setup=[],
        timeout=120,
        keep=False,
        runner=runner_bundle(),
        repo_key="0123456789abcdef",
    )
    target = BoxTarget(
        label="b", python=sys.executable, connect=lambda: box, env=env or {}
    )
    return run_box(target, plan, lambda _b, _p: None, threading.Event())


class _RecordingTransport(LocalTransport):
    """A real LocalTransport that also keeps every argv it ran (what `ps` on a box would show)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.argvs: list[list[str]] = []

    def open(self, argv: Sequence[str], *, deadline: float | None = None) -> LocalChannel:
        self.argvs.append(list(argv))
        return super().open(argv, deadline=deadline)


def test_host_env_values_reach_the_tests_but_never_a_command_line(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {
            "tests/test_env.py": (
                "import os\n"
                "def test_value_arrives():\n"
                "    assert os.environ['APP_DSN'] == 'postgres://u:hunter2pass@db/x'\n"
            )
        },
    )
    root = tmp_path / "box"
    root.mkdir()
    box = _RecordingTransport("b", root, base_env=dict(os.environ))
    outcome = _run_on_folder_box(repo, box, "env-run", {"APP_DSN": "postgres://u:hunter2pass@db/x"})
    assert outcome.receipt is not None, outcome.not_evaluated
    assert outcome.receipt.outcomes == {"tests/test_env.py::test_value_arrives": "passed"}
    assert box.argvs, "the box ran nothing"
    assert not any("hunter2pass" in arg for argv in box.argvs for arg in argv)


def test_hosts_check_from_a_subfolder_reads_the_repository_config(
    git_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = _bare_python()
    (git_repo / "pyproject.toml").write_text(f'[tool.charpin.hosts.clean]\npython = "{bare}"\n')
    _commit(git_repo)
    monkeypatch.chdir(git_repo / "tests")
    assert main(["hosts", "check", "--hosts", "clean"]) == 4
    assert f"[clean] BAD pytest: {bare} on clean" in capsys.readouterr().out


def test_an_oversized_log_keeps_its_end(tmp_path: Path) -> None:
    from charpin_runner.box.files import MAX_LOG_BYTES

    repo = make_repo(
        tmp_path / "repo",
        {
            "tests/test_loud.py": (
                "import sys\n"
                f"def test_loud():\n    sys.stdout.write('x' * {MAX_LOG_BYTES + 1_000_000})\n"
                "    assert False, 'the-real-failure'\n"
            )
        },
    )
    root = tmp_path / "box"
    root.mkdir()
    box = LocalTransport("b", root, base_env=dict(os.environ))
    outcome = _run_on_folder_box(repo, box, "loud")
    assert outcome.receipt is not None, outcome.not_evaluated
    log = outcome.stdout
    assert log.startswith(b"(charpin-remote: stdout.log is over ")
    assert b"the-real-failure" in log
    assert len(log) <= MAX_LOG_BYTES + 200


def test_run_markdown_goes_to_a_file_or_to_stdout_as_compare_does(
    git_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # #10 item 13: `--markdown FILE` writes the file; `-` prints the Markdown instead of the text
    # report (the run folder's line goes to stderr), as `compare --markdown -` does.
    md = tmp_path / "drift.md"
    base = ["run", "--repo", str(git_repo), "--hosts", "local", "--out", str(tmp_path / "runs")]
    main([*base, "-q", "--run-id", "r1", "--markdown", str(md)])
    out = capsys.readouterr().out
    assert md.read_text().startswith("## charpin drift") and "## charpin drift" not in out
    assert "run folder:" in out
    main([*base, "-q", "--run-id", "r2", "--markdown", "-"])
    captured = capsys.readouterr()
    assert captured.out.startswith("## charpin drift") and "run folder:" not in captured.out
    assert "run folder:" in captured.err
    assert main([*base, "--json", "--markdown", "-"]) == 64
    assert "--json and --markdown - would both print on stdout" in capsys.readouterr().err


def test_hosts_check_outside_a_repository_says_no_configuration_was_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # #10 item 13: the boxes are still checked, but an all-ok result must not read as a check of
    # the project's settings.
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    assert main(["hosts", "check", "--hosts", "local"]) == 0
    captured = capsys.readouterr()
    assert "[local] ok " in captured.out
    assert "note: no [tool.charpin] read" in captured.err
    assert f"{plain} is not inside a git repository; pass --repo DIR" in captured.err
    # A plain project folder with its own pyproject.toml is read as it is (no note).
    (plain / "pyproject.toml").write_text("[tool.charpin]\ntimeout = 60\n")
    assert main(["hosts", "check", "--hosts", "local"]) == 0
    assert "no [tool.charpin] read" not in capsys.readouterr().err


def test_a_repository_owned_by_another_user_is_named_with_gits_fix(
    git_repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # git will not open it ("dubious ownership"): that is not "not inside a git repository", and
    # the fix is git's own safe.directory line for the repository's top (#10 item 13).
    if os.geteuid() != 0:
        pytest.skip("needs root to give the repository to another user (CI runs as root)")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    subprocess.run(["chown", "-R", "65534", str(git_repo)], check=True)
    fix = f"if you trust it, run: git config --global --add safe.directory {git_repo}\n"
    assert main(["run", "--hosts", "local", "--repo", str(git_repo / "tests"), "-q"]) == 64
    err = capsys.readouterr().err
    assert f"detected dubious ownership in repository at '{git_repo}'" in err and fix in err
    assert "not inside a git repository" not in err
    monkeypatch.chdir(git_repo / "tests")
    assert main(["hosts", "check", "--hosts", "local"]) == 0
    err = capsys.readouterr().err
    assert "note: no [tool.charpin] read" in err and "dubious ownership" in err and fix in err

"""deploy/ examples: every `charpin-remote`/`charpin` flag they use exists; each file is sane.

A deploy file is copied onto a server and forgotten; a renamed flag would only show up as a failed
nightly run weeks later. So the invocations are checked against the real argparse parsers here.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from charpin_coordinator.cli import build_parser as build_remote_parser
from charpin_runner.cli import build_parser as build_runner_parser

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
DEPLOY_FILES = sorted(p for p in DEPLOY.rglob("*") if p.is_file())
# Files that must run the command (the README and the timer only talk about it).
INVOKING = ("systemd/charpin-parity.service", "cron/charpin-parity", "ci/nightly-parity.yml")

_PROGRAMS = ("charpin-remote", "charpin")
# Shell and Markdown punctuation that ends a command inside a line.
_SEPARATORS = re.compile(r"`|;|&&|\|\||\||\$\(|\)")
_OPERATOR = re.compile(r"^\d*[<>]")
_SHA_PIN = re.compile(r"^\s*-?\s*uses:\s*([\w.-]+/[\w./-]+)@([0-9a-f]{40})\s*(#.*)?$")


@dataclass(frozen=True)
class Invocation:
    """One command line found in a deploy file."""

    where: str
    program: str
    args: tuple[str, ...]


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Yield (first line number, line) with backslash continuations joined."""
    pending: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(line.strip())
        yield start, " ".join(pending)
        pending = []
    if pending:
        yield start, " ".join(pending)


def _tokens(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:  # prose with an apostrophe: plain words are enough to find flags
        return segment.split()


# `python -m charpin_coordinator ...` (the action runs it that way) is charpin-remote.
_MODULES = {"charpin_coordinator": "charpin-remote", "charpin_runner": "charpin"}


def _program(token: str) -> str | None:
    for name in _PROGRAMS:
        if token == name or token.endswith("/bin/" + name):
            return name
    return _MODULES.get(token)


def find_invocations(
    text: str, source: str, parsers: dict[str, argparse.ArgumentParser]
) -> list[Invocation]:
    """Return every charpin-remote/charpin command (a bare `charpin` only before a command)."""
    found = []
    for number, line in logical_lines(text):
        for segment in _SEPARATORS.split(line.lstrip("# ")):
            words = _tokens(segment)
            for index, word in enumerate(words):
                program = _program(word)
                if program is None:
                    continue
                args = _until_operator(words[index + 1 :])
                if program == "charpin" and not _starts_command(args, parsers["charpin"]):
                    continue  # the account in `sudo -u charpin ...` or `-o charpin -g ...`
                found.append(Invocation(f"{source}:{number}", program, tuple(args)))
    return found


def _until_operator(words: list[str]) -> list[str]:
    for index, word in enumerate(words):
        if _OPERATOR.match(word) or _program(word) is not None:
            return words[:index]
    return words


def _starts_command(args: list[str], parser: argparse.ArgumentParser) -> bool:
    return bool(args) and args[0] in _subcommands(parser)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def check_invocation(
    invocation: Invocation, parsers: dict[str, argparse.ArgumentParser]
) -> list[str]:
    """Return one problem line per unknown command or flag (exact spelling, no abbreviations)."""
    parser = parsers[invocation.program]
    path = [invocation.program]
    problems = []
    words = list(invocation.args)
    while words:
        word = words.pop(0)
        if word == "--":
            break  # the rest goes to the test command
        if word.startswith("-") and len(word) > 1:
            flag = word.split("=", 1)[0]
            action = _options(parser).get(flag)
            if action is None:
                problems.append(f"{invocation.where}: `{' '.join(path)}` has no option {flag}")
            elif action.nargs != 0 and "=" not in word and words:
                words.pop(0)  # the flag's value, never a command
            continue
        commands = _subcommands(parser)
        if commands and word in commands:
            parser = commands[word]
            path.append(word)
        elif commands:
            # Prose ("charpin-remote parity run") has no flags; a mistyped command line does.
            if any(w.startswith("-") for w in words):
                problems.append(f"{invocation.where}: `{' '.join(path)}` has no command {word!r}")
            break
    return problems


@pytest.fixture(scope="module")
def parsers() -> dict[str, argparse.ArgumentParser]:
    return {"charpin-remote": build_remote_parser(), "charpin": build_runner_parser()}


@pytest.fixture
def toy() -> dict[str, argparse.ArgumentParser]:
    """Small parsers shaped like the real ones, so the checker's own tests never move with them."""
    remote = argparse.ArgumentParser(prog="charpin-remote")
    remote.add_argument("--version", action="store_true")
    sub = remote.add_subparsers()
    run = sub.add_parser("run")
    run.add_argument("--hosts")
    run.add_argument("-q", "--quiet", action="store_true")
    hosts = sub.add_parser("hosts").add_subparsers()
    hosts.add_parser("check").add_argument("--hosts")
    runner = argparse.ArgumentParser(prog="charpin")
    runner.add_subparsers().add_parser("receipt").add_argument("--repo")
    return {"charpin-remote": remote, "charpin": runner}


def _invocations(parsers: dict[str, argparse.ArgumentParser]) -> list[Invocation]:
    found = []
    for path in DEPLOY_FILES:
        text = path.read_text(encoding="utf-8")
        found.extend(find_invocations(text, str(path.relative_to(DEPLOY)), parsers))
    return found


def test_deploy_has_the_documented_files() -> None:
    names = {str(p.relative_to(DEPLOY)) for p in DEPLOY_FILES}
    assert names >= {"README.md", "systemd/charpin-parity.timer", *INVOKING}


@pytest.mark.parametrize("name", INVOKING)
def test_each_invoking_file_runs_charpin_remote_run(
    name: str, parsers: dict[str, argparse.ArgumentParser]
) -> None:
    text = (DEPLOY / name).read_text(encoding="utf-8")
    runs = [i for i in find_invocations(text, name, parsers) if i.args[:1] == ("run",)]
    assert any("--hosts" in i.args for i in runs), f"{name} never calls `charpin-remote run`"


def test_every_flag_in_deploy_exists(parsers: dict[str, argparse.ArgumentParser]) -> None:
    invocations = _invocations(parsers)
    assert len(invocations) >= 3
    problems = [p for i in invocations for p in check_invocation(i, parsers)]
    assert problems == []


def test_checker_reports_a_flag_that_does_not_exist(
    toy: dict[str, argparse.ArgumentParser],
) -> None:
    text = "ExecStart=/opt/x/bin/charpin-remote run \\\n    --hosts a,b \\\n    --no-such-flag 3\n"
    [invocation] = find_invocations(text, "fake.service", toy)
    assert invocation.args == ("run", "--hosts", "a,b", "--no-such-flag", "3")
    assert check_invocation(invocation, toy) == [
        "fake.service:1: `charpin-remote run` has no option --no-such-flag"
    ]


def test_checker_reports_unknown_commands_and_abbreviations(
    toy: dict[str, argparse.ArgumentParser],
) -> None:
    text = (
        "# 1 2 * * * u charpin-remote runn --hosts a\n`charpin-remote --vers`\n"
        "Description=charpin-remote nightly parity run\n"
    )
    problems = [p for i in find_invocations(text, "f", toy) for p in check_invocation(i, toy)]
    assert problems == [
        "f:1: `charpin-remote` has no command 'runn'",
        "f:2: `charpin-remote` has no option --vers",
    ]


def test_checker_skips_the_account_named_charpin(toy: dict[str, argparse.ArgumentParser]) -> None:
    text = (
        "sudo -u charpin git fetch && install -o charpin -g charpin /x && "
        "sudo -u charpin /v/bin/charpin-remote --version > log\n"
    )
    found = find_invocations(text, "f", toy)
    assert [(i.program, i.args) for i in found] == [("charpin-remote", ("--version",))]


def test_every_deploy_file_starts_with_a_header() -> None:
    for path in DEPLOY_FILES:
        if path.suffix == ".md":
            continue
        text = path.read_text(encoding="utf-8")
        if text.startswith("#!"):  # a script: its header follows the interpreter line
            text = text.split("\n", 1)[1]
        head = text.split("\n\n", 1)[0]
        assert head.startswith("# "), path
        assert "Copy to" in head and "Edit" in head, f"{path}: header must say where and what"


def _unit(path: Path) -> dict[str, dict[str, str]]:
    """A tiny systemd unit reader: sections of key=value (continuations joined)."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for _, line in logical_lines(path.read_text(encoding="utf-8")):
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not key=value: {line!r}"
        current[key.strip()] = value.strip()
    return sections


def test_systemd_units() -> None:
    service = _unit(DEPLOY / "systemd/charpin-parity.service")["Service"]
    assert service["Type"] == "oneshot"
    assert service["User"] == "charpin"
    assert service["ExecStart"].startswith("/")  # systemd wants an absolute path
    timer = _unit(DEPLOY / "systemd/charpin-parity.timer")
    assert timer["Timer"]["OnCalendar"] == "daily"
    assert timer["Timer"]["Persistent"] == "true"
    assert timer["Timer"]["RandomizedDelaySec"]
    assert timer["Install"]["WantedBy"] == "timers.target"


def test_cron_line_has_five_time_fields_and_a_user() -> None:
    lines = (DEPLOY / "cron/charpin-parity").read_text(encoding="utf-8").splitlines()
    entries = [ln.lstrip("# ") for ln in lines if re.match(r"^#?\s*[\d*]", ln)]
    assert len(entries) == 1
    fields = entries[0].split()
    assert all(re.fullmatch(r"[\d*/,-]+", f) for f in fields[:5])
    assert fields[5] == "charpin"


WORKFLOW = DEPLOY / "ci/nightly-parity.yml"


def test_workflow_actions_are_pinned_by_full_sha() -> None:
    uses = [ln for ln in WORKFLOW.read_text(encoding="utf-8").splitlines() if "uses:" in ln]
    assert len(uses) >= 2
    for line in uses:
        assert _SHA_PIN.match(line), f"not pinned by a full commit sha: {line.strip()}"


def test_workflow_structure() -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "\t" not in text
    top = [ln for ln in text.splitlines() if ln and not ln.startswith((" ", "#"))]
    assert top[:4] == ["name: nightly-parity", "on:", "permissions: {}", "concurrency:"]
    assert re.search(r"^  schedule:\n    - cron: \"[^\"]+\"$", text, re.M)
    assert re.search(r"^  workflow_dispatch:", text, re.M)
    assert ".charpin/runs/" in text and "include-hidden-files: true" in text
    assert "$GITHUB_STEP_SUMMARY" in text


@pytest.mark.skipif(importlib.util.find_spec("yaml") is None, reason="PyYAML not installed")
def test_workflow_is_valid_yaml() -> None:
    import yaml  # type: ignore[import-untyped]

    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    assert data["permissions"] == {}
    steps = data["jobs"]["parity"]["steps"]
    assert any("upload-artifact" in s.get("uses", "") for s in steps)


def test_checker_walks_nested_commands_and_flag_values(
    toy: dict[str, argparse.ArgumentParser],
) -> None:
    text = (
        "charpin-remote hosts check --hosts run -q\n"
        "charpin receipt --repo x -- --pytest-flag\n"
        "charpin-remote hosts check --bogus=1\n"
    )
    problems = [p for i in find_invocations(text, "f", toy) for p in check_invocation(i, toy)]
    assert problems == [
        "f:1: `charpin-remote hosts check` has no option -q",
        "f:3: `charpin-remote hosts check` has no option --bogus",
    ]


# --- scripts: the disposable-server examples --------------------------------------------------

SCRIPTS = [p for p in DEPLOY_FILES if p.read_text(encoding="utf-8").startswith("#!")]

# The hcloud commands the examples may use and each one's flags, as the hcloud CLI reference
# (github.com/hetznercloud/cli, docs/reference/manual/hcloud_<command>.md) lists them. A flag
# Hetzner renames or removes (like server create --datacenter) must be changed here on purpose.
_HCLOUD_GLOBAL = {"--config", "--context", "--debug", "--debug-file", "--endpoint", "--quiet",
                  "--poll-interval", "--no-experimental-warnings", "-h", "--help"}  # fmt: skip
HCLOUD_FLAGS: dict[tuple[str, str], set[str]] = {
    ("server", "create"): {
        "--allow-deprecated-image", "--automount", "--enable-backup", "--enable-protection",
        "--firewall", "--image", "--label", "--location", "--name", "--network", "-o",
        "--output", "--placement-group", "--primary-ipv4", "--primary-ipv6", "--ssh-key",
        "--start-after-create", "--type", "--user-data-from-file", "--volume", "--without-ipv4",
        "--without-ipv6",
    },
    ("server", "delete"): set(),
    ("server", "ip"): {"-6", "--ipv6"},
    ("ssh-key", "create"): {"--label", "--name", "-o", "--output", "--public-key",
                            "--public-key-from-file"},
    ("ssh-key", "delete"): set(),
}  # fmt: skip


def hcloud_problems(text: str, source: str) -> list[str]:
    """One line per hcloud command or flag that is not in HCLOUD_FLAGS."""
    problems = []
    for number, line in logical_lines(text):
        if line.lstrip().startswith("#"):
            continue
        for segment in _SEPARATORS.split(line):
            words = _tokens(segment)
            if "hcloud" not in words:
                continue
            rest = words[words.index("hcloud") + 1 :]
            padded = [*rest, "", ""]
            command = (padded[0], padded[1])
            if command not in HCLOUD_FLAGS:
                problems.append(f"{source}:{number}: unknown command hcloud {' '.join(command)}")
                continue
            for word in _until_operator(rest[2:]):
                flag = word.split("=", 1)[0]
                if flag.startswith("-") and flag not in HCLOUD_FLAGS[command] | _HCLOUD_GLOBAL:
                    problems.append(
                        f"{source}:{number}: hcloud {' '.join(command)} has no option {flag}"
                    )
    return problems


def test_every_hcloud_flag_in_deploy_is_documented() -> None:
    found = [p for p in SCRIPTS if "hcloud " in p.read_text(encoding="utf-8")]
    assert {p.name for p in found} >= {"hcloud-provision.sh", "hcloud-dispose.sh"}
    problems = [
        problem
        for path in found
        for problem in hcloud_problems(path.read_text(encoding="utf-8"), path.name)
    ]
    assert problems == []


def test_hcloud_checker_reports_removed_flags_and_commands() -> None:
    text = (
        "hcloud server create --name x --datacenter fsn1-dc14 \\\n    --type cx22 >&2\n"
        "x=$(hcloud server ips x)\n# hcloud server create --nonsense (a comment)\n"
    )
    assert hcloud_problems(text, "f") == [
        "f:1: hcloud server create has no option --datacenter",
        "f:3: unknown command hcloud server ips",
    ]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_deploy_scripts_are_executable_and_well_formed(path: Path) -> None:
    assert os.access(path, os.X_OK), f"{path.name}: chmod +x it"
    text = path.read_text(encoding="utf-8")
    interpreter = text.splitlines()[0]
    if interpreter.endswith("python3"):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.add((node.module or "").split(".")[0])
        assert imported <= sys.stdlib_module_names, f"{path.name}: stdlib only"
    else:
        assert interpreter == "#!/usr/bin/env bash", path.name
        assert "\nset -euo pipefail\n" in text, f"{path.name}: a failing step must stop it"
        subprocess.run(["bash", "-n", str(path)], check=True)


# --- fleets on a CI engine: one `charpin receipt` per matrix job, one `compare` --------------

GITHUB_FLEET = DEPLOY / "ci/fleet-receipts.yml"
GITLAB_FLEET = DEPLOY / "ci/fleet-receipts.gitlab-ci.yml"
FLEETS = (GITHUB_FLEET, GITLAB_FLEET)


@pytest.mark.parametrize("path", FLEETS, ids=lambda p: p.name)
def test_fleet_jobs_name_receipts_by_label_and_compare_the_folder(
    path: Path, parsers: dict[str, argparse.ArgumentParser]
) -> None:
    found = find_invocations(path.read_text(encoding="utf-8"), path.name, parsers)
    receipts = [i for i in found if i.program == "charpin" and i.args[:1] == ("receipt",)]
    [receipt] = [i for i in receipts if "--output" in i.args]  # the header only names it
    args = dict(zip(receipt.args[1::2], receipt.args[2::2], strict=False))
    # The naming convention: --label <os>-py<python>, file receipt-<label>.json.
    assert args["--label"] == "$LABEL"
    assert args["--output"].endswith("/receipt-$LABEL.json")
    [compare] = [i for i in found if i.program == "charpin-remote" and "--out" in i.args]
    assert "--record" in compare.args
    assert compare.args[0] == "compare"
    assert not compare.args[-1].endswith(".json")  # the folder of every downloaded receipt
    assert [p for i in found for p in check_invocation(i, parsers)] == []


def test_github_fleet_actions_are_pinned_by_full_sha() -> None:
    uses = [ln for ln in GITHUB_FLEET.read_text(encoding="utf-8").splitlines() if "uses:" in ln]
    assert any("download-artifact" in ln for ln in uses)
    for line in uses:
        assert _SHA_PIN.match(line), f"not pinned by a full commit sha: {line.strip()}"


@pytest.mark.skipif(importlib.util.find_spec("yaml") is None, reason="PyYAML not installed")
def test_fleet_workflows_are_valid_yaml_with_a_matrix() -> None:
    import yaml

    github = yaml.safe_load(GITHUB_FLEET.read_text(encoding="utf-8"))
    assert github["permissions"] == {}
    receipt, compare = github["jobs"]["receipt"], github["jobs"]["compare"]
    assert set(receipt["strategy"]["matrix"]) == {"os", "python", "include"}
    # The runner's promise, Python >= 3.9, is a job of the fleet.
    assert {"3.9", "3.10"} <= {job["python"] for job in receipt["strategy"]["matrix"]["include"]}
    assert receipt["strategy"]["fail-fast"] is False
    assert receipt["env"]["LABEL"] == "${{ matrix.os }}-py${{ matrix.python }}"
    upload = next(s for s in receipt["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["with"]["name"] == "receipt-${{ env.LABEL }}"
    assert compare["needs"] == "receipt" and "cancelled()" in compare["if"]
    download = next(s for s in compare["steps"] if "download-artifact" in s.get("uses", ""))
    assert download["with"]["pattern"] == "receipt-*" and download["with"]["merge-multiple"]

    gitlab = yaml.safe_load(GITLAB_FLEET.read_text(encoding="utf-8"))
    assert gitlab["stages"] == ["receipt", "compare"]
    [matrix] = gitlab["receipt"]["parallel"]["matrix"]
    assert set(matrix) == {"OS", "PYTHON"}
    assert {"3.9", "3.10"} <= set(matrix["PYTHON"])
    assert 'LABEL="${OS}-py${PYTHON}"' in gitlab["receipt"]["script"]
    assert gitlab["compare"]["needs"] == [{"job": "receipt", "artifacts": True}]
    assert gitlab["compare"]["when"] == "always"


# The CI examples against the schemas GitHub and GitLab publish (SchemaStore's, as vendored by
# check-jsonschema: offline, pinned with the package). Structure the YAML checks above do not see
# (a misspelt key, a wrong type, a job without steps) fails here.
SCHEMAS = {
    "nightly-parity.yml": "vendor.github-workflows",
    "verify-pr.yml": "vendor.github-workflows",
    "fleet-receipts.yml": "vendor.github-workflows",
    "fleet-receipts.gitlab-ci.yml": "vendor.gitlab-ci",
}


def _schema_check(path: Path, schema: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("check_jsonschema") is None:
        pytest.skip("check-jsonschema is not installed (it is in the test extra)")
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_ci_schemas_cover_every_ci_example() -> None:
    assert sorted(SCHEMAS) == sorted(p.name for p in (DEPLOY / "ci").glob("*.yml"))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_ci_example_is_valid_for_its_ci_system(name: str) -> None:
    done = _schema_check(DEPLOY / "ci" / name, SCHEMAS[name])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_schema_check_fails_on_a_misspelt_key(name: str, tmp_path: Path) -> None:
    # Guard the guard: the same file with one key misspelt must be refused.
    text = (DEPLOY / "ci" / name).read_text(encoding="utf-8")
    key = "script:" if name.endswith(".gitlab-ci.yml") else "runs-on:"
    assert key in text
    broken = tmp_path / name
    broken.write_text(text.replace(key, key[:-1] + "z:", 1), encoding="utf-8")
    done = _schema_check(broken, SCHEMAS[name])
    assert done.returncode == 1, done.stdout + done.stderr


# --- the repository's own GitHub files: the reusable action and the release workflow ---------

REPO = DEPLOY.parent
OWN_SCHEMAS = {
    "action.yml": "vendor.github-actions",
    ".github/workflows/release.yml": "vendor.github-workflows",
}


@pytest.mark.parametrize("name", sorted(OWN_SCHEMAS))
def test_own_github_file_is_valid_for_its_schema(name: str) -> None:
    done = _schema_check(REPO / name, OWN_SCHEMAS[name])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(OWN_SCHEMAS))
def test_own_schema_check_fails_on_a_misspelt_key(name: str, tmp_path: Path) -> None:
    text = (REPO / name).read_text(encoding="utf-8")
    key = "using:" if name == "action.yml" else "runs-on:"
    assert key in text
    broken = tmp_path / Path(name).name
    broken.write_text(text.replace(key, key[:-1] + "z:", 1), encoding="utf-8")
    assert _schema_check(broken, OWN_SCHEMAS[name]).returncode == 1


@pytest.mark.parametrize("name", sorted(OWN_SCHEMAS))
def test_own_github_files_pin_actions_by_full_sha(name: str) -> None:
    lines = (REPO / name).read_text(encoding="utf-8").splitlines()
    uses = [ln for ln in lines if "uses:" in ln and not ln.lstrip().startswith("#")]
    assert uses
    for line in uses:
        assert _SHA_PIN.match(line), f"{name}: not pinned by a full commit sha: {line.strip()}"


def test_the_action_runs_real_flags(parsers: dict[str, argparse.ArgumentParser]) -> None:
    found = find_invocations((REPO / "action.yml").read_text(encoding="utf-8"), "action", parsers)
    commands = {i.args[0] for i in found if i.program == "charpin-remote" and i.args}
    assert {"run", "verify", "pr-comment"} <= commands
    assert [p for i in found for p in check_invocation(i, parsers)] == []


@pytest.mark.skipif(importlib.util.find_spec("yaml") is None, reason="PyYAML not installed")
def test_the_action_keeps_inputs_out_of_the_script_text() -> None:
    import yaml

    action = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    for step in action["runs"]["steps"]:
        # An input interpolated into `run:` is a script injection; inputs go through env.
        assert "${{ inputs." not in step.get("run", ""), step.get("name")
    names = [s.get("name", "") for s in action["runs"]["steps"]]
    assert any("job summary" in n for n in names) and any("comment" in n for n in names)
    assert any("upload-artifact" in s.get("uses", "") for s in action["runs"]["steps"])


@pytest.mark.skipif(importlib.util.find_spec("yaml") is None, reason="PyYAML not installed")
def test_the_release_builds_checks_and_publishes_with_trusted_publishing() -> None:
    import yaml

    release = yaml.safe_load((REPO / ".github/workflows/release.yml").read_text(encoding="utf-8"))
    triggers = release.get("on", release.get(True))
    assert triggers == {"push": {"tags": ["v*"]}}
    assert release["permissions"] == {}
    jobs = release["jobs"]
    build = "\n".join(s.get("run", "") for s in jobs["build"]["steps"])
    assert (
        "python -m build --outdir dist ." in build
        and "python -m build --outdir dist runner" in build
    )
    assert "twine check --strict dist/*" in build
    assert "runner_bundle()" in build  # the zipapp boxes run, as a release asset
    publish = jobs["publish"]
    assert publish["permissions"] == {"id-token": "write"}  # trusted publishing: no token
    assert publish["environment"]["name"] == "pypi"
    assert any("gh-action-pypi-publish" in s.get("uses", "") for s in publish["steps"])
    assert jobs["github-release"]["permissions"] == {"contents": "write"}
    assert "gh release create" in jobs["github-release"]["steps"][-1]["run"]


# Every place that tells a user how to install charpin. Nothing is published yet, so a pinned
# index version may only appear as the form to use after the first release.
INSTALL_DOCS = [
    REPO / "README.md",
    REPO / "runner" / "README.md",
    REPO / ".pre-commit-hooks.yaml",
    REPO / "action.yml",
    *DEPLOY_FILES,
]
_PINNED = re.compile(r"charpin-(?:remote|runner)(?:\[[\w,]+\])?==\d")


def test_no_install_instruction_pretends_a_release_exists() -> None:
    problems = []
    for path in INSTALL_DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if _PINNED.search(line):
                around = " ".join(lines[max(0, number - 3) : number]).lower()
                if "after the first release" not in around and "after it" not in around:
                    problems.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert problems == []


def test_ci_examples_install_from_one_edited_variable() -> None:
    for path in (DEPLOY / "ci").glob("*.yml"):
        text = path.read_text(encoding="utf-8")
        installs = [
            ln for ln in text.splitlines() if "pip install" in ln and "charpin" in ln.lower()
        ]
        assert installs, path.name
        for line in installs:
            assert '"$CHARPIN_REMOTE"' in line or '"$CHARPIN_RUNNER"' in line, line

"""Hostile: commits shaped to slip a pin change past `charpin guard` next to a code change.

Each attack is a real git history made with git in tmp_path and judged by the real CLI
(`python -m charpin_runner guard`, the same command the pre-commit hook and CI run).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, make_repo

PINS = '{"id": "a", "argv": ["app.py"]}\n'
PYPROJECT = '[project]\nname = "shop"\nversion = "1"\n\n[tool.charpin.pins]\ncases = "qa/cases"\n'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "shop",
        {
            "pyproject.toml": PYPROJECT,
            "app.py": "print('v1')\n",
            "pins.jsonl": PINS,
            "qa/cases/a/argv.json": '["app.py"]\n',
            "billing/license_fees.py": "FEE = 1\n",
            "src/changelog_parser.py": "def parse(): ...\n",
            "LICENSE": "MIT\n",
            "README.md": "shop\n",
        },
    )


def guard(repo: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "charpin_runner", "guard", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    return done.returncode, done.stdout + done.stderr


def commit(repo: Path, message: str, files: dict[str, str], links: dict[str, str] = {}) -> str:  # noqa: B006
    """Write files and (re)make symlinks, then commit everything with plain git."""
    for rel, text in files.items():
        path = repo / rel
        if path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for rel, target in links.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        os.symlink(target, path)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD")


def sections(out: str) -> tuple[str, str, str]:
    """(protected list, production-code list, symlink list) of a refusal; "" when absent."""
    before_links, _, links = out.partition("  symlinks (")
    mixed, _, code = before_links.partition("  production code:")
    return (mixed if code else ""), code, links


# --- documentation exemption: a name prefix is not documentation -------------------------------


@pytest.mark.parametrize(
    "code_path",
    [
        "billing/license_fees.py",
        "src/changelog_parser.py",
        "LICENSE.py",
        "COPYING_tool.py",
        "billing/README.md",  # a markdown file next to code may be a template the code renders
        "requirements.txt",
    ],
)
def test_doc_looking_code_with_pins_is_refused(repo: Path, code_path: str) -> None:
    base = head(repo)
    commit(repo, "raise fees", {code_path: "FEE = 2\n", "pins.jsonl": "{}\n"})
    code, out = guard(repo, "--range", f"{base}..HEAD")
    assert code == 2, out
    protected, production, _ = sections(out)
    assert "    pins.jsonl" in protected
    assert f"    {code_path}" in production


def test_doc_looking_code_with_pins_is_refused_when_staged(repo: Path) -> None:
    (repo / "billing/license_fees.py").write_text("FEE = 2\n")
    (repo / "pins.jsonl").write_text("{}\n")
    git(repo, "add", "-A")
    code, out = guard(repo, "--staged")
    assert code == 2, out
    assert "    billing/license_fees.py" in sections(out)[1]


def test_real_documentation_with_pins_is_still_accepted(repo: Path) -> None:
    base = head(repo)
    docs = {
        "LICENSE": "Apache\n",
        "LICENSE-MIT": "MIT\n",
        "CHANGELOG.md": "## 2\n",
        "NEWS": "x\n",
        "README.md": "more\n",
        "docs/pins.md": "how pins work\n",
        "doc/guide/index.rst": "guide\n",
    }
    commit(repo, "pins with notes", {**docs, "pins.jsonl": "{}\n"})
    code, out = guard(repo, "--range", f"{base}..HEAD")
    assert code == 0, out


# --- symlinks: the protected file lives somewhere the diff does not call "pins" -----------------


def test_pins_turned_into_a_symlink_is_refused_and_followed_later(repo: Path) -> None:
    base = head(repo)
    commit(repo, "copy pins", {"data/p.jsonl": PINS})  # code only: accepted
    link = commit(repo, "link pins", {}, {"pins.jsonl": "data/p.jsonl"})
    bad = commit(repo, "fix bug", {"data/p.jsonl": "{}\n", "app.py": "print('v2')\n"})

    code, out = guard(repo, "--range", f"{base}..HEAD")
    assert code == 2, out
    assert f"refused commit {link[:12]} 'link pins'" in out
    assert "    pins.jsonl -> data/p.jsonl" in out
    assert f"refused commit {bad[:12]} 'fix bug': it changes pins and production code" in out
    assert "refused 2 of 3 commits in " in out
    assert "not symlinks" in out

    # The link made before the range (e.g. with --no-verify) is still followed.
    code, out = guard(repo, "--range", f"{link}..HEAD")
    assert code == 2, out
    protected, production, _ = sections(out)
    assert "    data/p.jsonl (protected through symlink pins.jsonl)" in protected
    assert "    app.py" in production


def test_the_real_pins_file_alone_and_code_alone_are_accepted(repo: Path) -> None:
    commit(repo, "copy pins", {"data/p.jsonl": PINS})
    link = commit(repo, "link pins", {}, {"pins.jsonl": "data/p.jsonl"})
    commit(repo, "pins", {"data/p.jsonl": "{}\n"})
    commit(repo, "code", {"app.py": "print('v2')\n"})
    commit(repo, "unlink pins", {"pins.jsonl": "{}\n"})  # the fix: a regular file again
    code, out = guard(repo, "--range", f"{link}..HEAD")
    assert code == 0, out


def test_staged_change_follows_a_committed_pins_symlink(repo: Path) -> None:
    commit(repo, "copy pins", {"data/p.jsonl": PINS})
    commit(repo, "link pins", {}, {"pins.jsonl": "data/p.jsonl"})
    (repo / "data/p.jsonl").write_text("{}\n")  # writes the pins through the real path
    (repo / "app.py").write_text("print('v2')\n")
    git(repo, "add", "-A")
    code, out = guard(repo, "--staged")
    assert code == 2, out
    assert "data/p.jsonl (protected through symlink pins.jsonl)" in out


def test_staged_symlink_at_pins_is_refused_on_its_own(repo: Path) -> None:
    commit(repo, "copy pins", {"data/p.jsonl": PINS})
    (repo / "pins.jsonl").unlink()
    os.symlink("data/p.jsonl", repo / "pins.jsonl")
    git(repo, "add", "-A")
    code, out = guard(repo, "--staged")
    assert code == 2, out
    assert "refused the staged change: it adds or retargets a symlink" in out
    assert "    pins.jsonl -> data/p.jsonl" in out


@pytest.mark.parametrize(
    ("real", "links", "sneak", "followed"),
    [
        pytest.param(  # a parent folder of the cases
            {"store/cases/a/argv.json": '["app.py"]\n'},
            {"qa": "store"},
            {"store/cases/a/argv.json": "[]\n"},
            "store/cases/a/argv.json (protected through symlink qa)",
            id="cases-folder",
        ),
        pytest.param(  # a link inside a case folder makes its target part of the case
            {"lib/argv.json": '["app.py"]\n'},
            {"qa/cases/a/argv.json": "../../../lib/argv.json"},
            {"lib/argv.json": "[]\n"},
            "lib/argv.json (protected through symlink qa/cases/a/argv.json)",
            id="inside-a-case",
        ),
        pytest.param(  # [tool.charpin] edited through the real file
            {"config/pp.toml": PYPROJECT},
            {"pyproject.toml": "config/pp.toml"},
            {"config/pp.toml": PYPROJECT.replace('"qa/cases"', '"qa/other"')},
            "config/pp.toml (protected through symlink pyproject.toml)",
            id="pyproject",
        ),
    ],
)
def test_a_protected_path_behind_a_symlink_is_refused_then_followed(
    repo: Path, real: dict[str, str], links: dict[str, str], sneak: dict[str, str], followed: str
) -> None:
    commit(repo, "copy the real files", real)
    link = commit(repo, "link", {}, links)
    commit(repo, "sneak", {**sneak, "app.py": "print('v2')\n"})

    code, out = guard(repo, "--range", f"{link}~1..{link}")
    named = [f"    {rel} -> {target}" for rel, target in links.items()]
    assert code == 2 and all(line in sections(out)[2] for line in named), out
    code, out = guard(repo, "--range", f"{link}..HEAD")
    assert code == 2, out
    assert f"    {followed}" in sections(out)[0]
    assert "    app.py" in sections(out)[1]


def test_adding_a_symlink_that_points_at_the_pins_is_named(repo: Path) -> None:
    base = head(repo)
    links = {"lib/pins_view.jsonl": "../pins.jsonl", "lib/qa": "../qa"}
    link = commit(repo, "convenience links", {}, links)
    code, out = guard(repo, "--range", f"{base}..HEAD")
    assert code == 2, out
    assert "    lib/pins_view.jsonl -> ../pins.jsonl\n    lib/qa -> ../qa" in sections(out)[2]

    # The links protect nothing new: qa/ outside the case folder is still code, and the pins
    # file is named as itself.
    commit(repo, "qa tooling", {"qa/tool.py": "x = 1\n", "app.py": "print('v2')\n"})
    commit(repo, "pins and code", {"pins.jsonl": "{}\n", "app.py": "print('v3')\n"})
    code, out = guard(repo, "--range", f"{link}..HEAD")
    assert code == 2, out
    assert "refused 1 of 2 commits in " in out and "'pins and code'" in out
    assert "    pins.jsonl\n" in sections(out)[0]


def test_a_pins_symlink_out_of_the_repository_is_refused(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text(PINS)
    base = head(repo)
    commit(repo, "pins elsewhere", {}, {"pins.jsonl": str(outside)})
    code, out = guard(repo, "--range", f"{base}..HEAD")
    assert code == 2, out
    assert f"    pins.jsonl -> {outside} (outside the repository)" in out


def test_a_symlink_loop_at_the_pins_is_refused(repo: Path) -> None:
    base = head(repo)
    commit(repo, "loop", {}, {"pins.jsonl": "lib/pins", "lib/pins": "../pins.jsonl"})
    code, out = guard(repo, "--range", f"{base}..HEAD")
    assert code == 2, out
    assert "    pins.jsonl -> lib/pins (a symlink loop)" in out


def test_code_linked_into_docs_is_code(repo: Path) -> None:
    commit(repo, "impl in docs", {"docs/impl.py": "print('v1')\n"})
    base = commit(repo, "app is a link", {}, {"app.py": "docs/impl.py"})
    commit(repo, "sneak", {"docs/impl.py": "print('v2')\n", "pins.jsonl": "{}\n"})
    code, out = guard(repo, "--range", f"{base}..HEAD")
    assert code == 2, out
    assert "    docs/impl.py" in sections(out)[1]


def test_a_symlinked_pyproject_is_refused_and_its_target_protected(repo: Path) -> None:
    commit(repo, "copy config", {"config/pp.toml": PYPROJECT})
    link = commit(repo, "link pyproject", {}, {"pyproject.toml": "config/pp.toml"})
    moved = PYPROJECT.replace('"qa/cases"', '"qa/other"')
    commit(repo, "sneak", {"config/pp.toml": moved, "app.py": "print('v2')\n"})

    code, out = guard(repo, "--range", f"{link}~1..{link}")
    assert code == 2 and "    pyproject.toml -> config/pp.toml" in out, out
    code, out = guard(repo, "--range", f"{link}..HEAD")
    assert code == 2, out
    assert "config/pp.toml (protected through symlink pyproject.toml)" in out


def test_unrelated_symlinks_change_nothing(repo: Path) -> None:
    base = head(repo)
    commit(repo, "tool link", {}, {"bin/tool": "../app.py", "docs/readme-link.md": "../README.md"})
    commit(repo, "code", {"app.py": "print('v2')\n"})
    commit(repo, "pins", {"pins.jsonl": "{}\n", "qa/cases/a/argv.json": "[]\n"})
    code, out = guard(repo, "--range", f"{base}..HEAD")
    assert code == 0, out
    assert "ok, 3 commits in " in out


# --- the repository's own config runs nothing (CI checks branches nobody has reviewed) ----------


def _trap(tmp_path: Path) -> tuple[Path, Path]:
    """A program that records that it ran; (program, record)."""
    record = tmp_path / "attacker-ran"
    program = tmp_path / "trap.sh"
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> {shlex.quote(str(record))}\nexit 1\n')
    program.chmod(0o755)
    return program, record


def _signed_looking_commit(repo: Path) -> str:
    """A commit carrying a gpgsig header, so log.showSignature makes git run gpg.program."""
    body = (
        f"tree {git(repo, 'rev-parse', 'HEAD^{tree}')}\nparent {head(repo)}\n"
        "author a <a@b.invalid> 1 +0000\ncommitter a <a@b.invalid> 1 +0000\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n xx\n -----END PGP SIGNATURE-----\n\nsigned\n"
    )
    made = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-t", "commit", "-w", "--stdin"],
        input=body,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    git(repo, "update-ref", "HEAD", made)
    return made


def test_the_repositorys_config_runs_nothing_during_guard_range(repo: Path, tmp_path: Path) -> None:
    program, record = _trap(tmp_path)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("pre-commit", "post-checkout", "reference-transaction", "post-index-change"):
        shutil.copy(program, hooks / name)
    base = head(repo)
    commit(repo, "code", {"app.py": "print('v2')\n"})
    commit(repo, "pins", {"pins.jsonl": "{}\n"})
    signed = _signed_looking_commit(repo)
    git(repo, "config", "core.fsmonitor", str(program))
    git(repo, "config", "core.hooksPath", str(hooks))
    git(repo, "config", "log.showSignature", "true")
    git(repo, "config", "gpg.program", str(program))
    # The traps are live: git with this config runs them for the very commands the guard uses.
    git(repo, "diff-tree", "-r", "--name-status", f"{signed}~1", signed)
    git(repo, "log", "-1", "--format=%s", signed)
    assert len(record.read_text().splitlines()) >= 2
    record.unlink()

    code, out = guard(repo, "--range", f"{base}..HEAD")

    assert code == 0, out
    assert "ok, 3 commits in " in out
    assert not record.exists(), record.read_text()


def test_a_checkout_owned_by_another_user_is_read_only_where_the_user_trusts_it(
    repo: Path, tmp_path: Path
) -> None:
    base = head(repo)
    commit(repo, "code", {"app.py": "print('v2')\n"})
    user_config = tmp_path / "gitconfig"
    # git's own test switch: every repository looks owned by someone else (a CI container).
    env = {
        **os.environ,
        "GIT_TEST_ASSUME_DIFFERENT_OWNER": "1",
        "GIT_CONFIG_GLOBAL": str(user_config),
    }
    user_config.write_text("")
    code, out = guard(repo, "--range", f"{base}..HEAD", env=env)
    # Said as git says it, with git's fix, not as "not inside a git work tree" (#10 item 13).
    assert code == 64 and "dubious ownership" in out, out
    assert f"git config --global --add safe.directory {repo}" in out, out
    assert "not inside a git work tree" not in out
    user_config.write_text(f"[safe]\n\tdirectory = {repo}\n")
    code, out = guard(repo, "--range", f"{base}..HEAD", env=env)
    assert code == 0, out

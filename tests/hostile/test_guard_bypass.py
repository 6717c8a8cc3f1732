"""Hostile: commits shaped to slip a pin change past `charpin guard` next to a code change.

Each attack is a real git history made with git in tmp_path and judged by the real CLI
(`python -m charpin_runner guard`, the same command the pre-commit hook and CI run).
"""

from __future__ import annotations

import os
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


def guard(repo: Path, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "charpin_runner", "guard", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
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
    assert "refused 2 of 3 commit(s)" in out
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


def test_a_symlinked_parent_folder_of_the_cases_is_followed(repo: Path) -> None:
    commit(repo, "copy cases", {"store/cases/a/argv.json": '["app.py"]\n'})
    git(repo, "rm", "-q", "-r", "qa")
    link = commit(repo, "link qa", {}, {"qa": "store"})
    commit(repo, "sneak", {"store/cases/a/argv.json": "[]\n", "app.py": "print('v2')\n"})

    code, out = guard(repo, "--range", f"{link}~1..{link}")
    assert code == 2 and "    qa -> store" in out, out
    code, out = guard(repo, "--range", f"{link}..HEAD")
    assert code == 2, out
    assert "    store/cases/a/argv.json (protected through symlink qa)" in sections(out)[0]


def test_a_symlink_inside_a_case_folder_protects_its_target(repo: Path) -> None:
    commit(repo, "case data in lib", {"lib/argv.json": '["app.py"]\n'})
    link = commit(repo, "case via link", {}, {"qa/cases/a/argv.json": "../../../lib/argv.json"})
    commit(repo, "sneak", {"lib/argv.json": "[]\n", "app.py": "print('v2')\n"})

    code, out = guard(repo, "--range", f"{link}~1..{link}")
    assert code == 2 and "    qa/cases/a/argv.json -> ../../../lib/argv.json" in out, out
    code, out = guard(repo, "--range", f"{link}..HEAD")
    assert code == 2, out
    assert "lib/argv.json (protected through symlink qa/cases/a/argv.json)" in out


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
    assert "refused 1 of 2 commit(s)" in out and "'pins and code'" in out
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
    assert "ok, 3 commit(s)" in out

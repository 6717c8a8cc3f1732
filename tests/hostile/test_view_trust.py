"""Class E and the allow-list view: what the commit's code wrote never widens the sandbox view.

Seen by an attacker: prepare wrote a `.pth` file whose path line named `$HOME` into the run's
venv (b06); the view took it as one of the interpreter's folders and the test read
`~/.ssh/id_ed25519`. And on `local` (#19) the user site (~/.local/lib/pythonX.Y/site-packages)
and /etc/gitconfig (a credential helper) were in the view. The rule: a `.pth` path line counts
only in the trusted interpreter's environment (the one charpin runs on), or names a folder of
that interpreter or of the venv's own base installation; the user site and /etc/gitconfig are
not in the view. The second attack of the class was not fixed by hand: `setup` (the commit's
code, run once per dependency set) writes the path line into the cached venv instead.
"""

from __future__ import annotations

import os
import site
import sysconfig
from pathlib import Path

import pytest

from tests.hostile.harness import SAY_TOML, repo_with, require_bwrap, run, said

OUTER = site.getsitepackages()[0]
# The fresh venv gets this interpreter's pytest through a .pth file (no network): a path line
# naming the trusted interpreter's own site folder, which stays allowed.
OUTER_LINE = f"import site; open(site.getsitepackages()[0] + '/outer.pth', 'w').write({OUTER!r})"
READER = """
import os


def test_read():
    for path in {paths!r}:
        try:
            print("ATTEMPT read", path, open(path).read().strip())
        except OSError as exc:
            print("ATTEMPT refused", path, type(exc).__name__)
"""
# Written by the commit's code into the site folder of the venv it runs in.
WIDEN = (
    "import sys, pathlib\n"
    "site = next(p for p in sys.path if p.endswith('site-packages') and sys.prefix in p)\n"
    "pathlib.Path(site, 'docs.pth').write_text({folder!r} + chr(10))\n"
)


def _secret(tmp_path: Path) -> Path:
    home = tmp_path / "victim-home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("CANARY-PRIVATE-KEY\n")
    return home


@pytest.mark.slow
@pytest.mark.parametrize("writer", ["prepare", "setup"])
def test_a_pth_line_the_commit_wrote_never_widens_the_view(writer: str, tmp_path: Path) -> None:
    require_bwrap()
    home = _secret(tmp_path)
    key = str(home / ".ssh" / "id_ed25519")
    lines = {
        "prepare": (
            'setup = ["python -c \\"' + OUTER_LINE + '\\""]\nprepare = ["python widen.py"]\n'
        ),
        "setup": 'setup = ["python -c \\"' + OUTER_LINE + '\\"", "python widen.py"]\n',
    }
    toml = SAY_TOML + lines[writer]
    files = {
        "widen.py": WIDEN.format(folder=str(home)),
        "tests/test_read.py": READER.format(paths=[key]),
    }
    repo = repo_with(tmp_path / "repo", files, toml=toml)
    _, report, folder = run(repo, "clean")
    told = said(folder, "clean")
    assert f"refused {key}" in told, (told, report["not_evaluated"])
    assert "CANARY-PRIVATE-KEY" not in told


@pytest.mark.slow
def test_the_user_site_and_system_git_config_are_not_in_the_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#19 on `local`: the user site of the tests' interpreter, /etc/gitconfig."""
    require_bwrap()
    base = tmp_path / "userbase"
    # Where site puts the user site when PYTHONUSERBASE names base (as the runner's ask sees it).
    user_site = sysconfig.get_path("purelib", "posix_user", vars={"userbase": str(base)})
    os.makedirs(user_site)
    planted = os.path.join(user_site, "token.txt")
    Path(planted).write_text("USER-SITE-SECRET\n")
    monkeypatch.setenv("PYTHONUSERBASE", str(base))
    paths = [planted, "/etc/gitconfig", "/etc/passwd"]
    repo = repo_with(
        tmp_path / "repo", {"tests/test_read.py": READER.format(paths=paths)}, toml=SAY_TOML
    )
    _, _, folder = run(repo, "local")
    told = said(folder, "local")
    assert f"refused {planted}" in told, told
    assert "USER-SITE-SECRET" not in told
    if os.path.exists("/etc/gitconfig"):
        assert "refused /etc/gitconfig" in told, told
    assert "read /etc/passwd" in told, told  # the allow-list keeps what programs need

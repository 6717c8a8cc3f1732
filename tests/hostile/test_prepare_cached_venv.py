"""Class E: the cached setup venv is written by setup only, once, when it is built.

Seen by an attacker (b05): `prepare` (run without the sandbox) wrote `zz.pth` and a hook into the
box's cached setup venv; every later commit with the same dependency files ran its tests over
it, and their failing tests read passed. The rule: a cached venv is checked against the state
journaled when setup published it, before every use (a mismatch rebuilds it) and again after
prepare ran: prepare that wrote into it makes the run NOT EVALUATED (setup-failed, one line) and
the venv is removed. Under bubblewrap prepare sees it read-only. The second attack of the class
was not fixed by hand: prepare replaces an installed module of the cached venv instead of adding
a `.pth` file.
"""

from __future__ import annotations

import site
from pathlib import Path

import pytest

from tests.conftest import git
from tests.hostile.harness import not_evaluated, repo_with, run

OUTER = site.getsitepackages()[0]
OUTER_LINE = f"import site; open(site.getsitepackages()[0] + '/outer.pth', 'w').write({OUTER!r})"
# The cached venv's site folder is on the per-run venv's path (its _charpin_base.pth).
CACHED = "site = next(p for p in sys.path if '/venvs/' in p and p.endswith('site-packages'))\n"
HOOK = "import sys; sys.modules.setdefault('zz_owned', sys)\n"
POISON = {
    "pth": "import sys, pathlib\n"
    + CACHED
    + f"pathlib.Path(site, 'zz.pth').write_text({HOOK!r})\n",
    "module": "import sys, pathlib\n"
    + CACHED
    + "pathlib.Path(site, 'shoplib.py').write_text('OK = True\\n')\n",
}
SETUP = 'setup = ["python -c \\"' + OUTER_LINE + '\\"", "python make_lib.py"]\n'
MAKE_LIB = "import site, pathlib\npathlib.Path(site.getsitepackages()[0], 'shoplib.py').write_text('OK = False\\n')\n"
TEST = "import shoplib, sys\n\n\ndef test_lib():\n    assert not shoplib.OK and 'zz_owned' not in sys.modules\n"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["pth", "module"])
def test_prepare_cannot_write_the_cached_venv(how: str, tmp_path: Path) -> None:
    toml = "[tool.charpin]\n" + SETUP + 'prepare = ["python poison.py"]\n'
    files = {"poison.py": POISON[how], "make_lib.py": MAKE_LIB, "tests/test_lib.py": TEST}
    repo = repo_with(tmp_path / "repo", files, toml=toml)
    # Without bubblewrap: the write must be caught by the check, not stopped by the view.
    _, report, _ = run(repo, "clean", "--sandbox", "off", run_id="A")
    refused = not_evaluated(report).get("clean")
    assert refused is not None and refused["kind"] == "setup-failed", report["boxes"]
    assert "prepare wrote into the cached venv" in refused["reason"], refused
    # A later commit (same dependency files, harmless prepare) gets a rebuilt venv.
    (repo / "poison.py").write_text("pass\n")
    git(repo, "commit", "-qam", "B")
    _, report, _ = run(repo, "clean", "--sandbox", "off", run_id="B")
    assert not report["not_evaluated"], report["not_evaluated"]
    assert report["boxes"][0]["interpretation"] == "ok", report["boxes"]

"""Attack: the tests of an agent's patch reach the network, write outside their checkout or into
HOME. Confined (`charpin receipt --confine`, what `verify` uses) none of it lands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import make_repo
from tests.hostile.harness import require_bwrap

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")

REACHER = """
import os, socket, sys
from pathlib import Path


def test_reaches_out():
    found = []
    targets = (Path(sys.prefix) / "planted", Path({outside!r}), Path.home() / ".planted")
    for target, data in ((t, "planted") for t in targets):
        try:
            target.write_text(data)
            found.append("wrote " + str(target))
        except OSError as exc:
            found.append("refused " + type(exc).__name__)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    probe = socket.socket()
    probe.settimeout(2)
    found.append("net " + str(probe.connect_ex(({host!r}, {port}))))
    Path("attempts.txt").write_text("\\n".join(found))
"""


def test_confined_tests_write_only_their_checkout_and_reach_no_network(tmp_path: Path) -> None:
    require_bwrap()
    outside = tmp_path / "outside.txt"
    listener = __import__("socket").socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    host, port = listener.getsockname()
    test = REACHER.format(outside=str(outside), host=host, port=port)
    repo = make_repo(tmp_path / "repo", {"tests/test_reach.py": test})
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, PYTHONPATH=RUNNER, HOME=str(home))
    out = tmp_path / "receipt.json"
    argv = [sys.executable, "-m", "charpin_runner", "receipt", "--repo", str(repo), "-o", str(out)]
    subprocess.run(
        [*argv, "--confine", "-q"], env=env, capture_output=True, timeout=120, check=False
    )
    listener.close()
    receipt = json.loads(out.read_text())
    assert receipt["environment"]["sandbox"] == "bwrap-confined"
    attempts = (repo / "attempts.txt").read_text().splitlines()  # the checkout stays writable
    # The interpreter's environment is read-only; the host's /tmp is not there at all (a
    # write lands in the run's private /tmp and is gone with it); HOME is a private folder.
    assert attempts[0] == "refused OSError", attempts
    assert not outside.exists() and not (home / ".planted").exists()
    assert not (Path(sys.prefix) / "planted").exists()
    assert attempts[3] != "net 0", attempts  # the host's loopback listener is out of reach

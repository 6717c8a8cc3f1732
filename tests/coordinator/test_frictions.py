"""Small frictions a new user hits (#10 item 13): each message says what is true and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.drift import build_report
from charpin_coordinator.remote.hosts import resolve_hosts
from charpin_runner.errors import UsageError

from tests.conftest import make_repo
from tests.receipt_factory import HEAD, TREE, change, make_receipt


def test_a_mistyped_built_in_box_gets_a_suggestion(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host ci-box\n    HostName 127.0.0.1\n")
    with pytest.raises(UsageError, match="did you mean local\\?"):
        resolve_hosts(["lcoal"], ssh_config=config)
    with pytest.raises(UsageError, match="did you mean ci-box\\?"):
        resolve_hosts(["ci-bx"], ssh_config=config)


def test_identity_drift_names_only_what_moved() -> None:
    a = make_receipt("a")
    other = "9" * 40
    b = change(make_receipt("b"), identity=change(a.identity, head_after=other))
    report = build_report([("a", a), ("b", b)], expected_commit=HEAD)
    [identity] = [d for d in report.dimensions if d.name == "identity"]
    text = " ".join(identity.details)
    assert f"head moved during the run {HEAD[:12]} -> {other[:12]}" in text
    assert f"tree {TREE[:12]} -> {TREE[:12]}" not in text  # nothing said about what stayed


@pytest.mark.slow
def test_an_uncommitted_charpin_table_is_named_not_silently_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2] / "runner"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    repo = make_repo(
        tmp_path / "repo",
        {
            "tests/test_a.py": "def test_a():\n    pass\n",
            "pyproject.toml": "[tool.charpin]\ntimeout = 60\n",
        },
    )
    (repo / "pyproject.toml").write_text("[tool.charpin]\ntimeout = 90\n")
    out = tmp_path / "runs"
    main(["run", "--repo", str(repo), "--hosts", "clean", "--out", str(out), "--json", "-q"])
    err = capsys.readouterr().err
    assert "[tool.charpin] is read from commit" in err and "uncommitted changes" in err


def test_an_uncommitted_new_test_on_local_blames_local_not_clean() -> None:
    import dataclasses

    new = "tests/test_new.py::test_fresh"
    clean = make_receipt("clean")
    local = make_receipt("local")
    local = change(
        local,
        collection=dataclasses.replace(
            local.collection,
            collected=[*local.collection.collected, new],
            selected=[*local.collection.selected, new],
            executed=[*local.collection.executed, new],
        ),
        outcomes={**local.outcomes, new: "passed"},
        tree=dataclasses.replace(local.tree, dirty_before=["tests/test_new.py"]),
    )
    report = build_report([("local", local), ("clean", clean)], expected_commit=HEAD)
    parity = {g.box: g for g in report.gates if g.gate == "Collection parity"}
    assert parity["local"].status == "FAIL" and "tests/test_new.py" in parity["local"].detail
    assert parity["clean"].status == "PASS", parity["clean"].detail


def test_tests_failing_on_every_box_show_in_text_markdown_and_junit() -> None:
    import dataclasses
    import xml.etree.ElementTree as ET

    from charpin_coordinator.reports.junit import to_junit
    from charpin_coordinator.reports.markdown import render_markdown
    from charpin_coordinator.reports.text import render_text

    from tests.receipt_factory import IDS

    broken = {**make_receipt("a").outcomes, IDS[0]: "failed"}
    red = dataclasses.replace(make_receipt("a").exit, interpretation="failed", status=1)
    a = change(make_receipt("a"), outcomes=broken, exit=red)
    b = change(make_receipt("b"), outcomes=broken, exit=red)
    report = build_report([("a", a), ("b", b)], expected_commit=HEAD)
    assert report.exit_code & 1 and all(g.status == "PASS" for g in report.gates)
    assert f"a: {IDS[0]}" in render_text(report, color=False)
    assert "### Failing tests" in render_markdown(report)
    suites = {s.get("name"): s for s in ET.fromstring(to_junit(report)).iter("testsuite")}
    # The gates are their own suite; the failing test is in the box's tests suite.
    assert suites["charpin.a"].get("failures") == "0"
    assert suites["charpin.a.tests"].get("failures") == "1"
    assert suites["charpin.b.tests"].get("failures") == "1"

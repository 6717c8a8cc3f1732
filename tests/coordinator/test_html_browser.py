"""drift.html and index.html in a real headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by selenium): the gate matrix, a failing row, the outcome matrix and the
box not evaluated are in the DOM, a screenshot is kept, and hostile test ids and file names from a
real run stay text (no script runs, no `onerror` fires), with and without the page's CSP. A
second real run with `--against last` shows its "Since" section (new failures, a vanished test,
a Python upgrade as the likely cause) and the changed night in the trend; made with `--repeat 2`,
it shows its Repeats section too.

Without a browser these tests skip; under CHARPIN_REQUIRE_BROWSER=1 (CI) they fail instead.
Screenshots go to the test's tmp_path and, when CHARPIN_ARTIFACTS is set, are copied there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_repo

ROOT = Path(__file__).resolve().parents[2]

SCRIPT_ID = "<script>document.title='pwned'</script>"
IMG_ID = "<img src=x onerror=\"document.title='img'\">"
RTL_ID = "rtl\u202egpj.exe"
IMG_FILE = "<img src=y onerror=\"document.title='file'\">.txt"
RTL_FILE = "\u202eevil.txt"

HOSTILE_TESTS = f"""\
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
HOSTILE = {[SCRIPT_ID, IMG_ID, RTL_ID]!r}


@pytest.mark.parametrize("name", HOSTILE, ids=HOSTILE)
def test_hostile(name):
    assert False, name


def test_passes():
    pass


def test_only_here():
    # local runs the working tree, where this file is (uncommitted); clean does not have it
    assert (ROOT / "local-only.txt").exists()


def test_writes_hostile_files():
    (ROOT / {IMG_FILE!r}).write_text("x")
    (ROOT / {RTL_FILE!r}).write_text("x")
"""

# pytest would write U+202E in an id as the text `\\u202e`; the receipt should carry the real one.
NO_ID_ESCAPING = """\
[tool.pytest.ini_options]
disable_test_id_escaping_and_forfeit_all_rights_to_community_support = true
"""


def _missing_browser() -> str | None:
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[test]')"
    if _chromium() is None:
        return "no chromium binary (apt-get install chromium)"
    if shutil.which("chromedriver") is None:
        return "no chromedriver (apt-get install chromium-driver)"
    return None


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium through chromedriver, or a skip (a failure under
    CHARPIN_REQUIRE_BROWSER=1)."""
    missing = _missing_browser()
    if missing is not None:
        if os.environ.get("CHARPIN_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CHARPIN_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(_chromium())
    for flag in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--lang=en-US",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(shutil.which("chromedriver"))), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@dataclass(frozen=True)
class HostileRun:
    runs: Path
    folder: Path
    exit_code: int
    repo: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> HostileRun:
    """A real `charpin-remote run --hosts local,clean,down` of a repository whose test ids and
    written file names are hostile; `down` is an SSH box nobody listens for (NOT EVALUATED).
    Then `charpin-remote history html` over the runs folder."""
    base = tmp_path_factory.mktemp("hostile")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "runner"), str(ROOT / "coordinator")]),
        "XDG_CACHE_HOME": str(base / "cache"),
        "XDG_STATE_HOME": str(base / "state"),
        "GIT_AUTHOR_NAME": "charpin test",
        "GIT_AUTHOR_EMAIL": "test@charpin.invalid",
        "GIT_COMMITTER_NAME": "charpin test",
        "GIT_COMMITTER_EMAIL": "test@charpin.invalid",
    }
    with pytest.MonkeyPatch.context() as patch:
        for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME"):
            patch.setenv(name, env[name])
        patch.setenv("GIT_COMMITTER_EMAIL", env["GIT_COMMITTER_EMAIL"])
        repo = make_repo(
            base / "repo",
            {"pyproject.toml": NO_ID_ESCAPING, "tests/test_report.py": HOSTILE_TESTS},
        )
    (repo / "local-only.txt").write_text("only in this working tree\n")
    ssh_config = base / "ssh_config"
    ssh_config.write_text("Host down\n    HostName 127.0.0.1\n    Port 1\n    User nobody\n")
    runs = base / "runs"
    command = [sys.executable, "-m", "charpin_coordinator"]
    done = subprocess.run(
        [*command, "run", "--repo", str(repo), "--hosts", "local,clean,down", "--ssh-config",
         str(ssh_config), "--out", str(runs), "--run-id", "r1", "--timeout", "120", "-q"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert (runs / "r1" / "drift.html").is_file(), done.stderr
    index = subprocess.run(
        [*command, "history", "html", str(runs)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert index.returncode == 0, index.stderr
    return HostileRun(runs, runs / "r1", done.returncode, repo, env)


def _open(driver: Any, path: Path) -> None:
    """Load path and wait for its load event: by then every error event of an image (an
    <img onerror>) has fired; _no_script_ran then checks that nothing could fire later."""
    driver.get(path.as_uri())
    _loaded(driver)


def _loaded(driver: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


def _screenshot(driver: Any, tmp_path: Path, name: str) -> Path:
    """A screenshot of the whole page, kept under tmp_path and copied to CHARPIN_ARTIFACTS."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(1280, min(max(height, 600) + 120, 8000))
    shot = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _keep(shot)
    driver.set_window_size(1280, 900)
    return shot


def _texts(driver: Any, selector: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [
        str(e.get_attribute("textContent")) for e in driver.find_elements(By.CSS_SELECTOR, selector)
    ]


def test_drift_html_shows_the_gate_matrix_and_the_failing_rows(
    browser: Any, hostile_run: HostileRun, tmp_path: Path
) -> None:
    assert hostile_run.exit_code & 1 and hostile_run.exit_code & 2 and hostile_run.exit_code & 4
    _open(browser, hostile_run.folder / "drift.html")
    assert (
        browser.title
        == f"charpin drift · commit {_commit(hostile_run)} · exit {hostile_run.exit_code}"
    )
    header = _texts(browser, "#gate-matrix thead th")
    assert header == ["box", "Identity", "Clean tree", "Fixture integrity", "Collection parity",
                      "Quarantine", "Completeness", "Pin replay"]  # fmt: skip
    assert _texts(browser, "#gate-matrix tbody tr th") == ["local", "clean", "down"]
    details = _texts(browser, "#blocking-table tbody tr")
    assert _texts(browser, '#gate-matrix tr[data-box="local"] td') == [
        "PASS", "FAIL", "PASS", "PASS", "PASS", "PASS", "PASS",
    ], details  # fmt: skip
    assert _texts(browser, '#gate-matrix tr[data-box="down"] td') == ["NOT EVALUATED (refused)"]
    # The outcome matrix: the test that passed on local only.
    assert _texts(browser, "#outcome-matrix tbody tr") == [
        "tests/test_report.py::test_only_herepassedfailed"
    ]
    failing = _texts(browser, '#failing-tests tr[data-box="clean"] td.fail')
    assert "tests/test_report.py::test_only_here" in failing
    assert f"tests/test_report.py::test_hostile[{SCRIPT_ID}]" in failing
    blocking = " ".join(_texts(browser, "#blocking-table tbody tr"))
    assert "Clean tree" in blocking and "commit, discard or declare" in blocking
    [down] = _texts(browser, "#not-evaluated-list li")
    assert down.startswith("down NOT EVALUATED (refused): down: unreachable: connection refused")
    # Styled as the page says: a FAIL cell is red, a PASS cell green.
    from selenium.webdriver.common.by import By

    fail = browser.find_element(By.CSS_SELECTOR, '#gate-matrix tr[data-box="clean"] td.fail')
    assert fail.value_of_css_property("background-color") == "rgba(255, 235, 233, 1)"
    _screenshot(browser, tmp_path, "drift")


def _commit(run: HostileRun) -> str:
    import json

    report = json.loads((run.folder / "drift.json").read_text())
    return str(report["expected_commit"])[:12]


def _no_script_ran(driver: Any, title: str) -> None:
    from selenium.webdriver.common.by import By

    assert driver.title == title  # neither 'pwned' nor 'img' nor 'file'
    assert driver.find_elements(By.TAG_NAME, "script") == []
    assert driver.find_elements(By.TAG_NAME, "img") == []
    handlers = driver.execute_script(
        "return [...document.querySelectorAll('*')].flatMap(e => [...e.attributes])"
        ".map(a => a.name).filter(n => n.startsWith('on'))"
    )
    assert handlers == []


def test_hostile_test_ids_and_file_names_stay_text(
    browser: Any, hostile_run: HostileRun, tmp_path: Path
) -> None:
    # The check can see a script run: without escaping, this browser does run them.
    control = tmp_path / "control.html"
    control.write_text(f"<title>before</title><p>{IMG_ID}</p>")
    _open(browser, control)
    assert browser.title == "img"

    page = hostile_run.folder / "drift.html"
    _open(browser, page)
    title = browser.title
    assert title.startswith("charpin drift · commit ")
    _no_script_ran(browser, title)
    failing = _texts(browser, "#failing-tests td.fail")
    assert f"tests/test_report.py::test_hostile[{SCRIPT_ID}]" in failing
    assert f"tests/test_report.py::test_hostile[{IMG_ID}]" in failing
    # U+202E is shown as a marker, never applied: the id reads in its real order.
    assert "tests/test_report.py::test_hostile[rtl\\u202egpj.exe]" in failing
    markers = _texts(browser, "span.ctl")
    assert markers and set(markers) == {"\\u202e"}
    body = str(browser.execute_script("return document.body.textContent"))
    assert "\u202e" not in body
    assert IMG_FILE in body and "\\u202eevil.txt" in body  # file names, as text

    # Escaping alone holds: the same page without its Content-Security-Policy runs nothing.
    source = page.read_text(encoding="utf-8")
    without_csp = tmp_path / "drift-no-csp.html"
    without_csp.write_text(
        "\n".join(line for line in source.splitlines() if "Content-Security-Policy" not in line),
        encoding="utf-8",
    )
    assert "Content-Security-Policy" not in without_csp.read_text(encoding="utf-8")
    _open(browser, without_csp)
    _no_script_ran(browser, title)
    _screenshot(browser, tmp_path, "drift-hostile-no-csp")


def test_index_html_lists_the_run_and_links_to_its_page(
    browser: Any, hostile_run: HostileRun, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, hostile_run.runs / "index.html")
    assert browser.title == "charpin runs · 1 run(s)"
    _no_script_ran(browser, "charpin runs · 1 run(s)")
    [row] = _texts(browser, "#run-table tbody tr")
    assert row.startswith("r1") and "2 of 3" in row and "down (refused)" in row
    assert _texts(browser, "#trend-table tbody tr td:first-child") == ["clean", "down", "local"]
    _screenshot(browser, tmp_path, "index")
    from selenium.webdriver.support.ui import WebDriverWait

    browser.find_element(By.LINK_TEXT, "r1").click()
    target = (hostile_run.folder / "drift.html").as_uri()
    WebDriverWait(browser, 30).until(lambda d: d.current_url == target)
    _loaded(browser)
    assert browser.current_url == target
    assert browser.title.startswith("charpin drift · commit ")


# The night after r1: test_passes breaks, the other tests are gone, hostile ones come (failing).
NEXT_NIGHT = """\
import pytest

NEW = {new!r}


def test_passes():
    assert False, "broken since r1"


@pytest.mark.parametrize("name", NEW, ids=NEW)
def test_new(name):
    assert False, name
"""
OLD_PYTHON = "3.9.0"


@pytest.fixture(scope="module")
def since_run(hostile_run: HostileRun) -> Path:
    """r2: `run --hosts local,clean --against last --gate-against-last --repeat 2` after a
    commit that breaks a test, drops one and adds a hostile one; r1's receipt of `clean` says an
    older Python (the box was upgraded since), so the Python change is named as the likely cause.
    r1's pages and index.html stay as they were (this writes r2 and index-since.html), so the
    tests of r1 read the same files in any order."""
    repo, env = hostile_run.repo, hostile_run.env
    tests = repo / "tests" / "test_report.py"
    tests.write_text(NEXT_NIGHT.format(new=[SCRIPT_ID, RTL_ID]))
    for args in (["add", "tests/test_report.py"], ["commit", "-q", "-m", "the night after"]):
        subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True)
    stored = hostile_run.folder / "clean" / "receipt.json"
    receipt = json.loads(stored.read_bytes())
    receipt["environment"]["python"] = OLD_PYTHON
    stored.write_text(json.dumps(receipt))
    command = [sys.executable, "-m", "charpin_coordinator"]
    done = subprocess.run(
        [*command, "run", "--repo", str(repo), "--hosts", "local,clean", "--out",
         str(hostile_run.runs), "--run-id", "r2", "--timeout", "120", "-q", "--against", "last",
         "--gate-against-last", "--repeat", "2"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    folder = hostile_run.runs / "r2"
    assert (folder / "drift.html").is_file(), done.stderr
    index = subprocess.run(
        [*command, "history", "html", str(hostile_run.runs), "--out",
         str(hostile_run.runs / "index-since.html")],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert index.returncode == 0, index.stderr
    return folder


def test_drift_html_shows_what_changed_since_the_last_run(
    browser: Any, since_run: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, since_run / "drift.html")
    _no_script_ran(browser, browser.title)
    assert _texts(browser, "#since h2") == ["Since run r1"]
    assert _texts(browser, "nav a[href='#since']") == ["Since"]
    assert "Gating (--gate-against-last)" in _texts(browser, "#since-gating")[0]
    clean = _texts(browser, '#since-table tr[data-box="clean"] td')
    assert clean[:2] == ["clean", "r1"] and clean[4] == "exit bit 2"
    assert "likely cause: Python 3.9.0 → " in clean[3]
    block = '#since .since-box[data-box="clean"]'
    [cause] = _texts(browser, f'{block} [data-kind="likely-cause"]')
    assert cause.startswith(f"Likely cause: Python {OLD_PYTHON} → ")
    new_failures = _texts(browser, f'{block} ul[data-kind="new-failures"] li')
    assert "tests/test_report.py::test_passes" in new_failures
    assert f"tests/test_report.py::test_new[{SCRIPT_ID}]" in new_failures
    assert "tests/test_report.py::test_new[rtl\\u202egpj.exe]" in new_failures  # a marker
    vanished = _texts(browser, f'{block} ul[data-kind="vanished"] li')
    assert "tests/test_report.py::test_only_here" in vanished
    assert f"tests/test_report.py::test_hostile[{IMG_ID}]" in vanished
    # local had no older Python planted: its changes stand without a likely cause.
    assert _texts(browser, '#since .since-box[data-box="local"] [data-kind="likely-cause"]') == []
    # The trend (from the history r1 was recorded in) marks this night as changed.
    [mark] = _texts(browser, '#trend-table tr[data-box="clean"] span.changed')
    assert mark == "✗Δ"

    section = browser.find_element(By.ID, "since")
    assert section.size["height"] > 100 and section.is_displayed()
    # The section alone, with the window as tall as the page (an element shot stops at the
    # viewport's edge).
    full = int(browser.execute_script("return document.documentElement.scrollHeight"))
    browser.set_window_size(1280, min(full + 120, 8000))
    part = tmp_path / "drift-since-section.png"
    assert section.screenshot(str(part))
    assert _png_size(part)[1] >= min(section.size["height"], 8000) - 2
    _keep(part)
    shot = _screenshot(browser, tmp_path, "drift-since")
    # The full-page shot holds the section: its box lies inside the image.
    width, height = _png_size(shot)
    assert section.location["y"] + section.size["height"] <= height
    assert section.size["width"] <= width


def test_drift_html_shows_the_repeats_of_the_night(browser: Any, since_run: Path) -> None:
    _open(browser, since_run / "drift.html")
    _no_script_ran(browser, browser.title)
    assert _texts(browser, "nav a[href='#repeats']") == ["Repeats"]
    assert "Repeats never gate" in _texts(browser, "#repeats-gating")[0]
    for box in ("local", "clean"):
        cells = _texts(browser, f'#repeat-boxes tr[data-box="{box}"] td')
        assert cells == [box, "2 of 2", "0", "r2, r2.r2"], cells
    assert _texts(browser, "#repeat-matrix") == []  # every test failed the same way twice


def test_the_index_marks_the_night_that_changed(browser: Any, since_run: Path) -> None:
    _open(browser, since_run.parent / "index-since.html")
    for box in ("local", "clean"):
        marks = _texts(browser, f'#trend-table tr[data-box="{box}"] span')
        assert marks == ["✗", "✗Δ"], box  # r1, then r2 against it


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    data = path.read_bytes()[16:24]
    return int.from_bytes(data[:4], "big"), int.from_bytes(data[4:], "big")


def _keep(shot: Path) -> None:
    """A copy of shot in CHARPIN_ARTIFACTS, when set (CI keeps them)."""
    artifacts = os.environ.get("CHARPIN_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / shot.name)

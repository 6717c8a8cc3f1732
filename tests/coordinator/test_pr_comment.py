"""`charpin-remote pr-comment`: one sticky comment per marker, edited in place, against a local
HTTP server that answers the three GitHub REST calls it makes (list with pages, create, edit)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.prcomment import MAX_BODY, body_with_marker

TOKEN = "ghs_canary0123456789"
BOT = "github-actions[bot]"


class FakeGitHub:
    """Comments of one pull request, and every request seen."""

    def __init__(self) -> None:
        self.comments: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, str]] = []  # method, path, Authorization
        self.refuse = 0  # answer every call with this status when set

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, doc: object) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                length = int(self.headers.get("Content-Length", "0"))
                return json.loads(self.rfile.read(length))  # type: ignore[no-any-return]

            def _handle(self) -> None:
                hub.requests.append(
                    (self.command, self.path, self.headers.get("Authorization", ""))
                )
                if hub.refuse:
                    self._answer(hub.refuse, {"message": "Resource not accessible by integration"})
                    return
                path, _, query = self.path.partition("?")
                if self.command == "GET" and path == "/repos/o/r/issues/7/comments":
                    page = int(dict(p.split("=") for p in query.split("&"))["page"])
                    self._answer(200, hub.comments[(page - 1) * 100 : page * 100])
                elif self.command == "POST" and path == "/repos/o/r/issues/7/comments":
                    made = {"id": 1000 + len(hub.comments), "user": {"login": BOT}}
                    hub.comments.append({**made, "body": self._body()["body"]})
                    self._answer(201, made)
                elif self.command == "PATCH" and path.startswith("/repos/o/r/issues/comments/"):
                    number = int(path.rsplit("/", 1)[1])
                    [comment] = [c for c in hub.comments if c["id"] == number]
                    comment["body"] = self._body()["body"]
                    self._answer(200, comment)
                else:
                    self._answer(404, {"message": "Not Found"})

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def do_PATCH(self) -> None:
                self._handle()

        return Handler


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeGitHub]:
    hub = FakeGitHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), hub.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    monkeypatch.setenv("GITHUB_API_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("GITHUB_REPOSITORY", "o/r")
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    yield hub
    server.shutdown()
    server.server_close()


def _report(tmp_path: Path, text: str) -> str:
    path = tmp_path / "verdict.md"
    path.write_text(text)
    return str(path)


def test_the_first_run_creates_and_every_later_run_edits_in_place(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pr-comment", _report(tmp_path, "## REJECT\n"), "--marker", "cr:verify"]) == 0
    assert main(["pr-comment", _report(tmp_path, "## ACCEPT\n"), "--marker", "cr:verify"]) == 0
    assert [c["body"] for c in github.comments] == ["<!-- cr:verify -->\n## ACCEPT\n"]
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "charpin-remote: created comment 1000 on o/r#7 (cr:verify)",
        "charpin-remote: updated comment 1000 on o/r#7 (cr:verify)",
    ]
    assert {auth for _, _, auth in github.requests} == {f"Bearer {TOKEN}"}
    # Another marker is another comment.
    assert main(["pr-comment", _report(tmp_path, "run\n"), "--marker", "cr:run"]) == 0
    assert len(github.comments) == 2


def test_the_comment_is_found_on_a_later_page(github: FakeGitHub, tmp_path: Path) -> None:
    github.comments = [{"id": n, "user": {"login": "dev"}, "body": "lgtm"} for n in range(150)]
    github.comments.append({"id": 500, "user": {"login": BOT}, "body": "<!-- m -->\nold"})
    assert main(["pr-comment", _report(tmp_path, "new\n"), "--marker", "m"]) == 0
    assert github.comments[-1] == {"id": 500, "user": {"login": BOT}, "body": "<!-- m -->\nnew\n"}
    assert len(github.comments) == 151
    pages = [p for m, p, _ in github.requests if m == "GET"]
    assert [p.rsplit("page=", 1)[1] for p in pages] == ["1", "2"]


def test_a_planted_marker_by_someone_else_is_never_edited(
    github: FakeGitHub, tmp_path: Path
) -> None:
    github.comments = [{"id": 1, "user": {"login": "pr-author"}, "body": "<!-- m -->\nACCEPT"}]
    assert main(["pr-comment", _report(tmp_path, "REJECT\n"), "--marker", "m"]) == 0
    assert github.comments[0]["body"] == "<!-- m -->\nACCEPT"  # untouched
    assert github.comments[1]["body"] == "<!-- m -->\nREJECT\n"
    assert not [m for m, _, _ in github.requests if m == "PATCH"]


def test_a_read_only_token_is_one_line_and_exit_4(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    github.refuse = 403
    assert main(["pr-comment", _report(tmp_path, "x\n")]) == 4
    [line] = capsys.readouterr().err.splitlines()
    assert "403 Resource not accessible by integration" in line
    assert "a pull request from a fork gets a read-only token" in line
    assert TOKEN not in line


@pytest.mark.parametrize(
    ("unset", "message"),
    [
        ("GITHUB_TOKEN", "no token: set GITHUB_TOKEN"),
        ("GITHUB_REPOSITORY", "is not OWNER/NAME"),
        ("GITHUB_EVENT_PATH", "no pull request: pass --pr N"),
    ],
)
def test_what_is_missing_is_a_usage_error(
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    unset: str,
    message: str,
) -> None:
    monkeypatch.delenv(unset)
    assert main(["pr-comment", _report(tmp_path, "x\n")]) == 64
    assert message in capsys.readouterr().err
    assert github.requests == []


def test_the_token_goes_only_over_https(
    github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_API_URL", "http://api.example.invalid")
    assert main(["pr-comment", _report(tmp_path, "x\n")]) == 64
    assert github.requests == []


def test_a_long_report_is_cut_to_githubs_limit_with_a_note() -> None:
    body = body_with_marker("m", "x" * (MAX_BODY * 2))
    assert len(body) <= MAX_BODY
    assert body.startswith("<!-- m -->\n") and "the full report is in the job summary" in body

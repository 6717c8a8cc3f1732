"""A sticky pull-request comment: found by a hidden marker, edited in place, never duplicated.
Coordinator side; stdlib only (urllib). Library code: raises, never prints.

One comment per marker and author: the first comment of the pull request whose body holds
`<!-- MARKER -->` and whose author is the token's account (github-actions[bot] for a workflow's
GITHUB_TOKEN) is edited; without one a new comment is made. A comment by anybody else that
carries the marker is never touched (a pull request's author could plant one).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Final

from charpin_runner.errors import EXIT_NOT_EVALUATED, CharpinError, UsageError

MAX_BODY: Final = 65536  # GitHub's limit for a comment body, in characters
MAX_PAGES: Final = 30  # 3,000 comments: past that a pull request is not being reviewed
_TIMEOUT: Final = 30.0
_MARKER: Final = re.compile(r"[A-Za-z0-9._:/-]{1,100}\Z")


class DeliveryError(CharpinError):
    """GitHub refused the comment or could not be reached."""

    exit_code = EXIT_NOT_EVALUATED


@dataclass(frozen=True)
class Target:
    """Where the comment goes and as whom."""

    api: str  # https://api.github.com, or GITHUB_API_URL on GitHub Enterprise
    repo: str  # owner/name
    number: int  # the pull request
    token: str
    author: str = "github-actions[bot]"


def hidden(marker: str) -> str:
    """The invisible line that finds the comment again."""
    if not _MARKER.match(marker):
        raise UsageError(
            f"--marker {marker!r}: use up to 100 letters, digits and . _ : / -, e.g. "
            "charpin-remote:verify"
        )
    return f"<!-- {marker} -->"


def check_api(api: str) -> str:
    """The API base URL: https, or plain http on loopback only (a local test server)."""
    parts = urllib.parse.urlsplit(api)
    loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise UsageError(
            f"GITHUB_API_URL {api!r} is not an https URL; the token is only sent over https"
        )
    return api.rstrip("/")


def body_with_marker(marker: str, body: str) -> str:
    """The marker line, then the body, cut to GitHub's limit with a note saying so."""
    head = hidden(marker) + "\n"
    if len(head) + len(body) <= MAX_BODY:
        return head + body
    note = "\n\n… cut here: the full report is in the job summary and the run's artifacts.\n"
    return head + body[: MAX_BODY - len(head) - len(note)] + note


def upsert(target: Target, marker: str, body: str) -> tuple[str, int]:
    """Edit this marker's comment in place, or make it; return ("updated"|"created", id)."""
    text = body_with_marker(marker, body)
    found = find(target, hidden(marker))
    base = f"{check_api(target.api)}/repos/{target.repo}/issues"
    if found is not None:
        _call(target, "PATCH", f"{base}/comments/{found}", {"body": text})
        return "updated", found
    made = _call(target, "POST", f"{base}/{target.number}/comments", {"body": text})
    return "created", int(made.get("id", 0)) if isinstance(made, dict) else 0


def find(target: Target, line: str) -> int | None:
    """The id of the first comment by target.author that holds line, or None."""
    base = f"{check_api(target.api)}/repos/{target.repo}/issues/{target.number}/comments"
    for page in range(1, MAX_PAGES + 1):
        comments = _call(target, "GET", f"{base}?per_page=100&page={page}")
        if not isinstance(comments, list) or not comments:
            return None
        for comment in comments:
            if not isinstance(comment, dict):
                continue
            user = comment.get("user") or {}
            author = user.get("login") if isinstance(user, dict) else None
            if author == target.author and line in str(comment.get("body") or ""):
                return int(comment["id"])
        if len(comments) < 100:
            return None
    return None


def _call(target: Target, method: str, url: str, payload: dict[str, Any] | None = None) -> Any:
    data = None if payload is None else json.dumps(payload).encode("utf-8")
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - https checked
    request.add_header("Accept", "application/vnd.github+json")
    request.add_header("Authorization", f"Bearer {target.token}")
    request.add_header("X-GitHub-Api-Version", "2022-11-28")
    request.add_header("User-Agent", "charpin-remote")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT) as answer:  # noqa: S310
            raw = answer.read(8 * 1024 * 1024)
    except urllib.error.HTTPError as exc:
        why = _message(exc)
        hint = (
            "a pull request from a fork gets a read-only token (the report is in the job "
            "summary); otherwise give the job `permissions: pull-requests: write`"
            if exc.code in (401, 403, 404)
            else "try again later"
        )
        raise DeliveryError(f"GitHub refused {method} {url}: {exc.code} {why}; {hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DeliveryError(f"cannot reach {target.api}: {reason}; check GITHUB_API_URL") from None
    try:
        return json.loads(raw.decode("utf-8")) if raw.strip() else None
    except ValueError:
        raise DeliveryError(f"GitHub's answer to {method} {url} is not JSON") from None


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        doc = json.loads(exc.read(65536).decode("utf-8"))
    except (ValueError, OSError):
        return str(exc.reason)
    message = doc.get("message") if isinstance(doc, dict) else None
    return " ".join(str(message or exc.reason).split())[:200]

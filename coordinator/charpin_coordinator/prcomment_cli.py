"""`charpin-remote pr-comment FILE`: post a report as a sticky pull-request comment (edited in
place on every push, found by a hidden marker). Coordinator side; prints and picks the exit code.

Reads what a GitHub Actions job has: the token from GITHUB_TOKEN (or GH_TOKEN; never argv), the
repository from GITHUB_REPOSITORY, the API from GITHUB_API_URL, the pull request from --pr or
the event file (GITHUB_EVENT_PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from charpin_runner.errors import EXIT_CLEAN, UsageError

from charpin_coordinator.prcomment import Target, check_api, upsert

MAX_REPORT_BYTES = 16 * 1024 * 1024


def add_parsers(sub: Any) -> None:
    """Register `pr-comment`."""
    parser = sub.add_parser(
        "pr-comment",
        exit_codes="0 the comment was made or edited, 4 GitHub refused it or could not be "
        "reached (a fork's read-only token), 64 usage (no token, repository or pull request)",
        help="post a Markdown report as a sticky pull-request comment, edited in place",
        description="Post FILE (e.g. verify --markdown's) on the pull request as one comment "
        "that later runs edit in place: it is found again by a hidden <!-- MARKER --> line and "
        "its author, so a push never adds a second one. The token comes from GITHUB_TOKEN or "
        "GH_TOKEN, never from the command line.",
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="the Markdown report, - for stdin")
    parser.add_argument(
        "--marker",
        default="charpin-remote",
        help="tells this comment apart from others on the pull request (default charpin-remote)",
    )
    parser.add_argument("--pr", type=int, metavar="N", help="pull request (default: the event's)")
    parser.add_argument(
        "--repo-slug",
        metavar="OWNER/NAME",
        help="repository (default $GITHUB_REPOSITORY)",
    )
    parser.add_argument(
        "--author",
        default="github-actions[bot]",
        help="the token's account: only its comments are edited (default github-actions[bot])",
    )
    parser.set_defaults(handler=run_pr_comment)


def run_pr_comment(args: argparse.Namespace) -> int:
    """Make or edit the comment; one line says which."""
    env = os.environ
    token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN")
    if not token:
        raise UsageError("no token: set GITHUB_TOKEN (the job's ${{ github.token }}) or GH_TOKEN")
    slug = args.repo_slug or env.get("GITHUB_REPOSITORY", "")
    if slug.count("/") != 1 or not all(slug.split("/")):
        raise UsageError(f"repository {slug!r} is not OWNER/NAME; pass --repo-slug OWNER/NAME")
    number = args.pr or _event_number(env.get("GITHUB_EVENT_PATH"))
    if not number or number < 1:
        raise UsageError("no pull request: pass --pr N, or run on a pull_request event")
    body = _read(args.file)
    target = Target(
        api=check_api(env.get("GITHUB_API_URL") or "https://api.github.com"),
        repo=slug,
        number=number,
        token=token,
        author=args.author,
    )
    what, comment = upsert(target, args.marker, body)
    print(f"charpin-remote: {what} comment {comment} on {slug}#{number} ({args.marker})")
    return EXIT_CLEAN


def _event_number(path: str | None) -> int | None:
    if not path:
        return None
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for key in ("pull_request", "issue"):
        item = event.get(key) if isinstance(event, dict) else None
        if isinstance(item, dict) and isinstance(item.get("number"), int):
            return int(item["number"])
    return None


def _read(path: Path) -> str:
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(MAX_REPORT_BYTES)
        else:
            with path.open("rb") as handle:
                data = handle.read(MAX_REPORT_BYTES)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}; pass the Markdown report") from None
    return data.decode("utf-8", "replace")

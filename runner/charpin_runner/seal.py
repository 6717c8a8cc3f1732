"""The receipt seal: an HMAC only the runner's parent can compute. Runs everywhere; stdlib only.

The coordinator makes a fresh random key per box and run and hands it to the runner on its
standard input (never argv or the environment, which other processes of the same user can read
through /proc). The runner reads the key before it starts anything, closes that input, and
after the test command's whole process group is dead writes `RECEIPT.seal` next to the receipt:
the receipt's sha256, the runner's exit status and an HMAC-SHA256 over both. A test can read the
receipt path from its parent's command line and plant a complete, well-formed receipt there,
but it cannot compute the MAC, so the coordinator refuses any receipt whose seal does not check.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import sys

from charpin_runner.errors import EXIT_DRIFT, EXIT_INTERRUPTED, IntegrityError, UsageError
from charpin_runner.interpret import EXIT_CODES
from charpin_runner.receipt import Receipt

SEAL_SUFFIX = ".seal"
_DOMAIN = b"charpin-receipt-seal-v1"
_KEY = re.compile(rb"[0-9a-f]{64}")
MAX_SEAL_BYTES = 4096
_PR_SET_DUMPABLE = 4


def runner_status(receipt: Receipt, interrupted: bool) -> int:
    """The status `charpin receipt` exits with for receipt: its interpretation's code, with the
    drift bit for a pin that did not pass (design §6), or the interrupted status. The runner
    seals it; the coordinator recomputes it from the receipt it decoded."""
    if interrupted:
        return EXIT_INTERRUPTED
    code = EXIT_CODES[receipt.exit.interpretation]
    pins = receipt.pins
    drifted = pins.replayed and any(result.status != "passed" for result in pins.results)
    return code | EXIT_DRIFT if drifted else code


def new_key() -> str:
    """A fresh 256-bit key as 64 hex digits (coordinator side)."""
    return os.urandom(32).hex()


def read_key_from_stdin() -> str:
    """Read the one-line key, then point fd 0 at /dev/null so no child inherits the pipe."""
    line = sys.stdin.buffer.readline(256).strip()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if not _KEY.fullmatch(line):
        raise UsageError("--seal-stdin expects 64 hex digits on standard input; charpin-remote sends them")
    not_dumpable()
    return line.decode("ascii")


def not_dumpable() -> None:
    """Linux: make /proc/<pid>/mem and ptrace of this process unavailable to the test process
    (same user, not root), so a seal key cannot be read out of our memory. Every process that
    holds one calls it: the runner, the box agent, and the coordinator."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # here only: some minimal Pythons lack it

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass


def _mac(key: str, run_id: str, digest: str, exit_code: int) -> str:
    message = b"\n".join([_DOMAIN, run_id.encode(), digest.encode(), str(exit_code).encode()])
    return hmac.new(bytes.fromhex(key), message, hashlib.sha256).hexdigest()


def make(key: str, run_id: str, receipt: bytes, exit_code: int) -> bytes:
    """The seal document for receipt bytes and the exit status the runner is about to return."""
    digest = hashlib.sha256(receipt).hexdigest()
    doc = {"receipt_sha256": digest, "exit": exit_code, "mac": _mac(key, run_id, digest, exit_code)}
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


def check(key: str, run_id: str, receipt: bytes, seal: bytes, source: str) -> int:
    """Verify seal against receipt; return the exit status the runner sealed. IntegrityError if
    the receipt was not written by the runner that holds key. (The caller checks the status
    against the decoded receipt with runner_status.)"""
    try:
        doc = json.loads(seal[:MAX_SEAL_BYTES])
        digest, code, mac = doc["receipt_sha256"], doc["exit"], doc["mac"]
        if not (isinstance(digest, str) and isinstance(code, int) and isinstance(mac, str)):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise IntegrityError(
            f"{source}: the receipt's seal is unreadable; the receipt is refused "
            "(something other than the runner wrote it)"
        ) from None
    if not hmac.compare_digest(mac, _mac(key, run_id, digest, code)):
        raise IntegrityError(
            f"{source}: the receipt's seal does not check; the receipt is refused "
            "(it was not written by this run's runner: forged or from another run)"
        )
    if not hmac.compare_digest(digest, hashlib.sha256(receipt).hexdigest()):
        raise IntegrityError(
            f"{source}: the receipt changed after the runner sealed it; the receipt is refused"
        )
    return int(code)

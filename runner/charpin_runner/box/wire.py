"""Frames of the box protocol: a JSON header line, then the payload it sizes. Runs on boxes and
the coordinator; stdlib only.

One frame is `{"...": ..., "size": N}\n` (ASCII JSON, so the header holds no raw newline)
followed by exactly N payload bytes. The coordinator sends requests (`{"op": ...}`) and the box
agent answers each with one reply (`{"ok": true, ...}` or `{"ok": false, "kind": ..., "error":
...}`); the bootstrap that starts the agent speaks the same frames, so a box that cannot run the
agent still answers in a form the coordinator reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Callable, Optional

from charpin_runner.errors import IntegrityError

MAX_HEADER = 1 << 20
# A snapshot bundle of a big repository is the largest payload; anything past this is refused.
MAX_PAYLOAD = 1 << 31
_CHUNK = 1 << 16

Header = dict[str, Any]
Frame = tuple[Header, bytes]


def encode(header: Mapping[str, Any], payload: bytes = b"") -> bytes:
    """One frame: header (with its payload size added) as a line, then payload."""
    line = json.dumps({**header, "size": len(payload)}, ensure_ascii=True, separators=(",", ":"))
    return line.encode("ascii") + b"\n" + payload


class Reader:
    """Frames from a byte source: recv(n) returns up to n bytes, b"" at end of stream."""

    def __init__(self, recv: Callable[[int], bytes]) -> None:
        self._recv = recv
        self._buffer = bytearray()

    def buffered(self) -> bool:
        """True when bytes of a next frame have already been read (a select() would not say so)."""
        return bool(self._buffer)

    def read(self) -> Optional[Frame]:
        """The next frame, or None when the stream ended cleanly between frames."""
        newline = self._buffer.find(b"\n")
        while newline < 0:
            if len(self._buffer) > MAX_HEADER:
                raise IntegrityError(
                    "box protocol: a frame header is over 1 MiB; the other side is not charpin"
                )
            chunk = self._recv(_CHUNK)
            if not chunk:
                if self._buffer:
                    raise IntegrityError(
                        "box protocol: the stream ended inside a frame header: "
                        + _shown(bytes(self._buffer))
                    )
                return None
            self._buffer += chunk
            newline = self._buffer.find(b"\n")
        line = bytes(self._buffer[:newline])
        del self._buffer[: newline + 1]
        header = _header(line)
        payload = self._exactly(header["size"])
        return header, payload

    def _exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = self._recv(min(max(size - len(self._buffer), _CHUNK), 1 << 22))
            if not chunk:
                raise IntegrityError(
                    f"box protocol: the stream ended {size - len(self._buffer)} bytes short of "
                    "a frame's payload"
                )
            self._buffer += chunk
        payload = bytes(self._buffer[:size])
        del self._buffer[:size]
        return payload


def _header(line: bytes) -> Header:
    try:
        header = json.loads(line.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise IntegrityError(f"box protocol: not a frame header: {_shown(line)}") from None
    size = header.get("size") if isinstance(header, dict) else None
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_PAYLOAD:
        raise IntegrityError(f"box protocol: a frame header without a valid size: {_shown(line)}")
    return dict(header)


def _shown(data: bytes) -> str:
    text = data[:200].decode("utf-8", "replace")
    return " ".join(text.split()) or "(empty)"

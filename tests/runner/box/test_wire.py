"""The box protocol's frames: exact round trips and one-line refusals of broken streams."""

from __future__ import annotations

import io

import pytest
from charpin_runner.box import wire
from charpin_runner.errors import IntegrityError


def reader_of(data: bytes, chunk: int = 7) -> wire.Reader:
    stream = io.BytesIO(data)
    return wire.Reader(lambda size: stream.read(min(size, chunk)))


def test_frames_round_trip_with_binary_payloads_split_anywhere() -> None:
    payload = bytes(range(256)) * 3 + b'\n{"size": 1}\n'
    data = wire.encode({"op": "put", "name": "é\n"}, payload) + wire.encode({"op": "bye"})
    reader = reader_of(data)
    assert reader.read() == ({"op": "put", "name": "é\n", "size": len(payload)}, payload)
    assert reader.read() == ({"op": "bye", "size": 0}, b"")
    assert reader.read() is None


def test_the_header_is_one_ascii_line() -> None:
    line, _, rest = wire.encode({"text": "a\nb\u202e"}, b"xy").partition(b"\n")
    assert line.isascii() and rest == b"xy"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json\n", "not a frame header: not json"),
        (b'{"op": "x"}\n', "without a valid size"),
        (b'{"size": -1}\n', "without a valid size"),
        (b'{"size": true}\n', "without a valid size"),
        (b"[1, 2]\n", "without a valid size"),
        (b'{"size": 10}\nshort', "5 bytes short"),
        (b'{"size": 0', "ended inside a frame header"),
    ],
)
def test_broken_streams_are_refused_in_one_line(data: bytes, message: str) -> None:
    with pytest.raises(IntegrityError, match=message) as caught:
        reader_of(data).read()
    assert "\n" not in str(caught.value)


def test_an_endless_header_is_refused_without_reading_it_all() -> None:
    reads = []

    def recv(size: int) -> bytes:
        reads.append(size)
        return b"x" * size

    with pytest.raises(IntegrityError, match="over 1 MiB"):
        wire.Reader(recv).read()
    assert sum(reads) <= wire.MAX_HEADER + 2 * 65536

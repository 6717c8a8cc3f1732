"""Coordinator side. Masks the coordinator's secrets in anything a run keeps or prints.

Design §8: secrets never enter receipts, logs or remote argv. Tests may legitimately need tokens
(the `local` box runs with this process's environment), so the box keeps them and only the
artefacts are cleaned. Structured data is cleaned value by value *before* it is encoded
(`value`, `json_document`): once a string has been JSON-, Markdown- or XML-escaped, a secret
holding `"`, `\\`, `|`, `<` or a control character no longer appears as itself and a byte search
would miss it. Byte streams nobody decodes (box logs) are cleaned with `data`, and every rendered
output passes through `data` once more as a second line of defence.

A secret is the value of an environment variable whose name looks like a credential (the same
rule that refuses such names in a host's `env` allow-list). Values shorter than MIN_SECRET_CHARS
are left alone: masking every "1" or "true" would mangle ordinary output and hide nothing.
Each value is masked as itself and in the forms a test's output commonly shows it: hex, base64
and urlsafe base64 (a dumped header or credential file), JSON string escapes, Python's repr and
unicode-escape (how pytest writes parametrize ids), percent-encoding, and the escaped form
every display shows (`render.shown`: \\xNN for controls, \\uNNNN for direction marks).
Also masked: the value reversed or spaced out (a blank or tab between characters), and the
characters of a base64 or base32 blob that encode the value wherever it sits in the blob (HTTP
Basic auth is base64("user:" + token)). A log cut at its cap is cut again at a line break before
it is masked (`tail`), so a secret split by the cap leaves no readable half.
Limits: any other transformation (another encoding, encryption, a value split over lines) is
not recognised.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

from charpin_runner.fixtures import printable

from charpin_coordinator.remote.hosts import is_secret_name
from charpin_coordinator.reports.escape import shown

MIN_SECRET_CHARS: Final = 8


def _spellings(value: str) -> set[str]:
    """The value as text a program commonly prints it in (before any byte-level encoding)."""
    spellings = {
        value,
        json.dumps(value, ensure_ascii=False)[1:-1],
        json.dumps(value)[1:-1],
        repr(value)[1:-1],
        shown(value),  # as the reports and the progress lines show it
        # As the runner writes a file name into a receipt (undecodable bytes as \\xNN), e.g. a
        # test that names a file after it: the runner's own function, so the two cannot differ.
        printable(value),
        # Of the bytes: a value from a non-UTF-8 environment has undecodable bytes (as %XX).
        urllib.parse.quote(_encode(value), safe=""),
        urllib.parse.quote_plus(_encode(value), safe=""),
    }
    try:
        spellings.add(value.encode("unicode_escape").decode("ascii"))
    except UnicodeEncodeError:  # a lone surrogate from a non-UTF-8 environment
        pass
    return spellings


def _encode_with(text: str) -> tuple[bytes, str]:
    """text as bytes, and the error handler that turns them back into text losslessly:
    undecodable bytes come back as themselves; a surrogate that did not come from such a byte
    (JSON can spell one) as its UTF-8 form."""
    try:
        return text.encode("utf-8", "surrogateescape"), "surrogateescape"
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass"), "surrogatepass"


def _encode(text: str) -> bytes:
    return _encode_with(text)[0]


def _forms(value: str) -> set[bytes]:
    forms: set[bytes] = set()
    for spelling in _spellings(value) | {value[::-1]}:
        forms.add(_encode(spelling))
    raw = _encode(value)
    forms |= {raw.hex().encode(), raw.hex().upper().encode()}
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        forms.add(encoded)
        forms.add(encoded.rstrip(b"="))  # unpadded, as in JWTs and URLs
    # Inside a larger encoded blob (HTTP Basic auth is base64("user:" + token), a credentials
    # file is base64 as a whole): the characters that depend on the secret's bytes alone, for
    # every alignment the secret can have in the blob.
    for encode, bits in _BLOB_ENCODINGS:
        for offset in range(_alignments(bits)):
            forms.add(_core(encode(b"\0" * offset + raw), offset, len(raw), bits))
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


_BLOB_ENCODINGS = (
    (base64.b64encode, 6),
    (base64.urlsafe_b64encode, 6),
    (base64.b32encode, 5),
    (lambda raw: base64.b32encode(raw).lower(), 5),
)


def _alignments(bits: int) -> int:
    """How many byte offsets give distinct character alignments (3 for base64, 5 for base32)."""
    return 3 if bits == 6 else 5


def _core(encoded: bytes, offset: int, size: int, bits: int) -> bytes:
    """The characters of encoded (of `offset` unknown bytes, then the secret's `size` bytes,
    then anything) whose bits all come from the secret's bytes."""
    chars = [
        j
        for j in range(len(encoded))
        if (bits * j) // 8 >= offset and (bits * j + bits - 1) // 8 <= offset + size - 1
    ]
    return encoded[chars[0] : chars[-1] + 1] if chars else b""


class Redactor:
    """Replace every known form of every secret value with `[redacted:NAME]`."""

    def __init__(self, secrets: Mapping[str, str]):
        pairs: dict[bytes, bytes] = {}
        for name in sorted(secrets):
            value = secrets[name]
            if len(value) < MIN_SECRET_CHARS:
                continue
            for form in _forms(value):
                pairs.setdefault(form, f"[redacted:{name}]".encode())
        # Longest first, so a secret that contains another one is masked whole.
        self._pairs = sorted(pairs.items(), key=lambda item: (-len(item[0]), item[0]))
        # Spaced out (`t o k e n`, `toke n`): a blank or tab allowed between any two bytes.
        self._spaced = [
            (re.compile(b"[ \t]?".join(re.escape(bytes([b])) for b in _encode(value))), mask)
            for name, value in sorted(secrets.items())
            if len(value) >= MIN_SECRET_CHARS
            for mask in [f"[redacted:{name}]".encode()]
        ]
        # One scan tells whether a short string holds any form: most strings of a report hold
        # none. (For big blobs, one substring search per form is faster than the alternation.)
        self._any = re.compile(
            b"|".join(
                [re.escape(form) for form, _ in self._pairs]
                + [pattern.pattern for pattern, _ in self._spaced]
            )
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Redactor:
        """The secrets of an environment: values of credential-looking names."""
        return cls({name: value for name, value in env.items() if is_secret_name(name)})

    @property
    def names(self) -> list[str]:
        """The variable names whose values are masked (for messages and tests)."""
        return sorted({mask.decode()[10:-1] for _, mask in self._pairs})

    def data(self, blob: bytes) -> bytes:
        """Return blob with every secret form replaced."""
        for form, mask in self._pairs:
            if form in blob:
                blob = blob.replace(form, mask)
        for pattern, mask in self._spaced:
            blob = pattern.sub(mask, blob)
        return blob

    def tail(self, blob: bytes) -> bytes:
        """The end of a longer stream, cut to a whole line before it is masked: a cap that fell
        inside a secret must not leave its other half readable. Without a line break in it, a
        start that is the end of a secret form is masked as such."""
        cut = blob.find(b"\n")
        if 0 <= cut < len(blob) - 1:
            return self.data(blob[cut + 1 :])
        for form, mask in self._pairs:
            for size in range(len(form) - 1, 3, -1):
                if blob.startswith(form[-size:]):
                    return self.data(mask + blob[size:])
        return self.data(blob)

    def text(self, text: str) -> str:
        """Return text with every secret form replaced."""
        if not self._pairs:
            return text
        raw, handler = _encode_with(text)
        if not self._any.search(raw):
            return text
        masked = self.data(raw)
        if masked == raw:
            return text
        return masked.decode("utf-8", handler)

    def value(self, obj: Any) -> Any:
        """Return a copy of JSON-like data (str, list, tuple, dict) with every string masked,
        dictionary keys included; other values are returned as they are."""
        if not self._pairs:
            return obj
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, (list, tuple)):
            return [self.value(item) for item in obj]
        if isinstance(obj, dict):
            return {self.value(key): self.value(item) for key, item in obj.items()}
        return obj

    def json_document(self, raw: bytes) -> bytes:
        """Mask the strings of a JSON document and encode it again the way the runner writes
        receipts (sorted keys, indent 1, UTF-8, one trailing newline); a document that holds no
        secret comes back as the same bytes. Input that is not JSON is cleaned as bytes with
        `data` (a consumer that decodes it refuses it anyway)."""
        if not self._pairs or self._clear_without_decoding(raw):
            return raw
        try:
            decoded = json.loads(raw)
        except (ValueError, RecursionError):
            return self.data(raw)
        masked = self.value(decoded)
        if masked == decoded:
            return raw
        text = json.dumps(masked, sort_keys=True, indent=1, ensure_ascii=False)
        try:
            return text.encode("utf-8") + b"\n"
        except UnicodeEncodeError:  # a lone surrogate: only its \uXXXX escape is valid UTF-8
            return json.dumps(masked, sort_keys=True, indent=1).encode("ascii") + b"\n"

    def _clear_without_decoding(self, raw: bytes) -> bool:
        """Whether raw's bytes alone show that no string in it holds a form. In UTF-8 JSON
        without a backslash every string is its own bytes, so no form in raw means no form in
        any string; an escape or another encoding needs the decoding walk."""
        if b"\\" in raw or json.detect_encoding(raw) != "utf-8":
            return False
        # One substring search per form: on a big blob much faster than the alternation.
        return not any(form in raw for form, _ in self._pairs)

"""Coordinator side; stdlib only. Masks the coordinator's secrets in anything a run keeps or prints.

Design §8: secrets never enter receipts, logs or remote argv. Tests may legitimately need tokens
(the `local` box runs with this process's environment), so the box keeps them and only the
artefacts are cleaned: every fetched log, receipt and rendered report passes through a Redactor
before it is written to the run folder or printed.

A secret is the value of an environment variable whose name looks like a credential (the same
rule that refuses such names in a host's `env` allow-list). Values shorter than MIN_SECRET_CHARS
are left alone: masking every "1" or "true" would mangle ordinary output and hide nothing.
Each value is masked as itself and as its hex, base64 and urlsafe-base64 encodings (a test that
dumps a header or a credential file often shows it encoded). Limits: an encoding that starts in
the middle of a larger encoded blob, or any other transformation, is not recognised.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Final

from charpin_coordinator.remote.hosts import is_secret_name

MIN_SECRET_CHARS: Final = 8


def _forms(value: str) -> set[bytes]:
    raw = value.encode("utf-8", "surrogateescape")
    forms = {raw, raw.hex().encode(), raw.hex().upper().encode()}
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        forms.add(encoded)
        forms.add(encoded.rstrip(b"="))  # unpadded, as in JWTs and URLs
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


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
        return blob

    def text(self, text: str) -> str:
        """Return text with every secret form replaced."""
        if not self._pairs:
            return text
        return self.data(text.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")

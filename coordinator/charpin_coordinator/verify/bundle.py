"""Coordinator side, the evidence bundle of a verify; stdlib, receipts.py and OpenSSH ssh-keygen."""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from charpin_runner.errors import IntegrityError, UsageError

from charpin_coordinator.receipts import load_receipt
from charpin_coordinator.verify import bundlesign, bundletar
from charpin_coordinator.verify.bundlesign import SIGNING_NAMESPACE
from charpin_coordinator.verify.bundletar import MANIFEST, MAX_BUNDLE_BYTES, SIGNATURE

# The format, `charpin-verify-bundle-v1`: an uncompressed POSIX (ustar) tar whose members have
# fixed metadata and a fixed order, so the same evidence always gives the same bytes:
#   manifest.json                   binds everything below by sha256, and the two commits
#   patch.diff, verdict.json        the patch as given, the verify report (its JSON)
#   boxes/NNN-<slug>/base.json      per box, in label order: the receipt of the base run
#   boxes/NNN-<slug>/patched.json   and of the patched run
#   manifest.json.sig               optional: `ssh-keygen -Y sign -n charpin-verify-v1` of it
# The manifest is the only thing signed; every other member is reached through its hashes.
FORMAT = "charpin-verify-bundle-v1"
_MAX_MEMBERS = 4096
_OUTCOMES = ("ACCEPT", "REJECT", "INCOMPLETE")
_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # SHA-1 or SHA-256 repositories
_SHA256 = re.compile(r"[0-9a-f]{64}")
_BLOCK = 512
_MANIFEST_KEYS = {"format", "base", "patched", "patch_sha256", "outcome", "verdict_sha256", "boxes"}
_BOX_KEYS = {"label", "folder", "base_sha256", "patched_sha256"}

Signature = Literal["absent", "unchecked", "verified"]


@dataclass(frozen=True)
class Evidence:
    """What one verify found, to be bound into a bundle."""

    base: str  # base commit sha
    patched: str  # the commit the patched runs ran
    patch: bytes
    receipts: dict[str, tuple[bytes, bytes]]  # box label -> (base receipt, patched receipt)
    verdict: bytes  # the verify report, JSON
    outcome: str  # ACCEPT | REJECT | INCOMPLETE


@dataclass(frozen=True)
class Checked:
    """A bundle that passed every check."""

    manifest: dict[str, Any]
    verdict: bytes
    outcome: str
    signer: str | None  # the principal whose key signed it, only when the signature was verified
    # absent: no signature; unchecked: one is there but no allowed_signers were given to check
    # it against, so it proves nothing; verified: it verifies for `signer`.
    signature: Signature

    @property
    def signed(self) -> bool:
        """A signature is in the bundle, checked or not."""
        return self.signature != "absent"


def write_bundle(path: Path, evidence: Evidence, *, sign_key: Path | None = None) -> None:
    """Write the bundle; refuse evidence read_bundle would refuse, and never write over a file."""
    if path.exists():
        raise UsageError(f"{path} already exists; bundles are never overwritten, pick another")
    members = _members_of(evidence)
    _check_members(members, f"refusing to write {path}", "the verify evidence is inconsistent")
    if sign_key is not None:
        members[SIGNATURE] = bundlesign.sign(members[MANIFEST], sign_key)
    if (
        sum(_BLOCK + bundletar.padded(len(d)) for d in members.values()) + tarfile.RECORDSIZE
        > MAX_BUNDLE_BYTES
    ):
        raise UsageError(
            f"refusing to write {path}: over the {MAX_BUNDLE_BYTES}-byte bundle cap; "
            "verify fewer boxes"
        )
    bundletar.write_new(path, members)


def read_bundle(path: Path, *, allowed_signers: Path | None = None) -> Checked:
    """Re-check every member, hash, binding and (with allowed_signers) the signature."""
    if allowed_signers is not None and not allowed_signers.is_file():
        raise UsageError(
            f"cannot read {allowed_signers}; pass an allowed_signers file (see ssh-keygen(1))"
        )
    members = bundletar.read_tar(path)
    where = str(path)
    signature = members.pop(SIGNATURE, None)
    signer: str | None = None
    state: Signature = "absent" if signature is None else "unchecked"
    if allowed_signers is not None:
        if signature is None:
            raise IntegrityError(
                f"{where}: the bundle is not signed and allowed signers were given; refused"
            )
        # First: with a signer list, nothing in a manifest nobody trusted is worth reading.
        signer = bundlesign.verify_signature(members.get(MANIFEST, b""), signature, allowed_signers, where)
        state = "verified"
    manifest = _check_members(members, where, "the bundle is refused")
    outcome = str(manifest["outcome"])
    return Checked(manifest, members["verdict.json"], outcome, signer, state)


# Building.


def _members_of(evidence: Evidence) -> dict[str, bytes]:
    if not isinstance(evidence.receipts, dict):
        raise UsageError("Evidence.receipts must map box labels to (base, patched) receipt bytes")
    boxes: list[dict[str, str]] = []
    members = {"patch.diff": evidence.patch, "verdict.json": evidence.verdict}
    for number, label in enumerate(sorted(evidence.receipts), 1):
        before, after = evidence.receipts[label]
        folder = _folder(number, label)
        members[f"{folder}/base.json"], members[f"{folder}/patched.json"] = before, after
        boxes.append(
            {"label": label, "folder": folder, "base_sha256": _sha(before),
             "patched_sha256": _sha(after)}
        )  # fmt: skip
    manifest = {
        "format": FORMAT,
        "base": evidence.base,
        "patched": evidence.patched,
        "patch_sha256": _sha(evidence.patch),
        "outcome": evidence.outcome,
        "verdict_sha256": _sha(evidence.verdict),
        "boxes": boxes,
    }
    encoded = json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=True) + "\n"
    return {MANIFEST: encoded.encode("ascii"), **members}


def _folder(number: int, label: str) -> str:
    """A member folder for a box: its place in label order, then a readable slug.

    The number alone makes it unique and safe; the slug only helps a human reading the tar.
    Only [A-Za-z0-9_-] survive, so no label can make `..`, `/`, a quote or a control character.
    """
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", label)[:40].strip("_") or "box"
    return f"boxes/{number:03d}-{slug}"


def _check_members(members: dict[str, bytes], where: str, fate: str) -> dict[str, Any]:
    raw = members.get(MANIFEST)
    if raw is None:
        raise IntegrityError(f"{where}: no {MANIFEST}; not a charpin evidence bundle, {fate}")
    for name, data in members.items():
        if len(data) > bundletar.cap(name):
            raise IntegrityError(f"{where}: {name} is over its {bundletar.cap(name)}-byte cap; {fate}")
    manifest = _manifest(raw, where, fate)
    expected = _expected(manifest)
    extra, missing = sorted(set(members) - set(expected)), sorted(set(expected) - set(members))
    if extra or missing:
        raise IntegrityError(
            f"{where}: members differ from the manifest (extra {extra}, missing {missing}); {fate}"
        )
    for name, want in expected.items():
        if want is not None and _sha(members[name]) != want:
            raise IntegrityError(
                f"{where}: {name} does not match its sha256 in the manifest; {fate}"
            )
    _check_verdict(manifest, members["verdict.json"], where, fate)
    _check_receipts(manifest, members, where, fate)
    return manifest


def _manifest(raw: bytes, where: str, fate: str) -> dict[str, Any]:
    problem = f"{where}: {MANIFEST} is not a {FORMAT} manifest"
    data = _json(raw, f"{problem} (bad JSON); {fate}")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise IntegrityError(f"{problem}; {fate}")
    if set(data) != _MANIFEST_KEYS:
        raise IntegrityError(f"{problem} (keys {sorted(data)}); {fate}")
    for key, pattern in (("base", _COMMIT), ("patched", _COMMIT), ("patch_sha256", _SHA256),
                         ("verdict_sha256", _SHA256)):  # fmt: skip
        if not isinstance(data[key], str) or not pattern.fullmatch(data[key]):
            raise IntegrityError(f"{problem} ({key} {_short(data[key])}); {fate}")
    if data["outcome"] not in _OUTCOMES:
        raise IntegrityError(f"{problem} (outcome {_short(data['outcome'])}); {fate}")
    boxes = data["boxes"]
    if not isinstance(boxes, list) or len(boxes) > _MAX_MEMBERS:
        raise IntegrityError(f"{problem} (boxes is not a list); {fate}")
    labels: list[str] = []
    for number, box in enumerate(boxes, 1):
        if not isinstance(box, dict) or set(box) != _BOX_KEYS:
            raise IntegrityError(f"{problem} (box {number}); {fate}")
        label = box["label"]
        if not isinstance(label, str) or box["folder"] != _folder(number, label):
            # The folder is derived, never taken: a manifest cannot point outside boxes/.
            raise IntegrityError(f"{problem} (box {number}'s folder); {fate}")
        if not all(isinstance(box[k], str) and _SHA256.fullmatch(box[k])
                   for k in ("base_sha256", "patched_sha256")):  # fmt: skip
            raise IntegrityError(f"{problem} (box {label!r}'s hashes); {fate}")
        labels.append(label)
    if labels != sorted(set(labels)):
        raise IntegrityError(f"{problem} (box labels repeated or out of order); {fate}")
    return data


def _expected(manifest: dict[str, Any]) -> dict[str, str | None]:
    """Every member the manifest implies, with its sha256 (None: the manifest itself)."""
    out: dict[str, str | None] = {
        MANIFEST: None,
        "patch.diff": manifest["patch_sha256"],
        "verdict.json": manifest["verdict_sha256"],
    }
    for box in manifest["boxes"]:
        out[f"{box['folder']}/base.json"] = box["base_sha256"]
        out[f"{box['folder']}/patched.json"] = box["patched_sha256"]
    return out


def _check_verdict(manifest: dict[str, Any], verdict: bytes, where: str, fate: str) -> None:
    report = _json(verdict, f"{where}: verdict.json is not JSON; {fate}")
    said = report.get("verdict") if isinstance(report, dict) else None
    if said != manifest["outcome"]:
        raise IntegrityError(
            f"{where}: verdict.json says {_short(said)}, the manifest "
            f"{manifest['outcome']!r}; {fate}"
        )
    # Not `patched`: the report names the agent's commit, while the patched runs ran that
    # commit with the protected paths put back, which the manifest (and the receipts) name.
    for key in ("base", "patch_sha256"):
        if report.get(key) != manifest[key]:
            raise IntegrityError(
                f"{where}: verdict.json's {key} is {_short(report.get(key))}, the manifest's "
                f"{_short(manifest[key])}; it judged something else, {fate}"
            )


def _check_receipts(
    manifest: dict[str, Any], members: dict[str, bytes], where: str, fate: str
) -> None:
    for box in manifest["boxes"]:
        label = box["label"]
        for side in ("base", "patched"):
            name = f"{box['folder']}/{side}.json"
            receipt = load_receipt(members[name], source=f"{where}: {name}")
            identity = receipt.identity
            commit = manifest[side]
            if identity.head_before != commit:
                raise IntegrityError(
                    f"{where}: box {label!r}: the {side} receipt ran "
                    f"{identity.head_before[:12]}, not the manifest's {side} "
                    f"{commit[:12]}; it is another commit's receipt, {fate}"
                )
            if identity.expected_commit not in (None, commit):
                raise IntegrityError(
                    f"{where}: box {label!r}: the {side} receipt was asked to run "
                    f"{_short(identity.expected_commit)}, not the manifest's {side}; {fate}"
                )
            # The base ran no patch; the patched run must have run exactly this one.
            want = manifest["patch_sha256"] if side == "patched" else None
            if identity.patch_sha256 != want:
                raise IntegrityError(
                    f"{where}: box {label!r}: the {side} receipt was made for patch "
                    f"{_short(identity.patch_sha256)}, not {_short(want)}; it is another "
                    f"patch's receipt, {fate}"
                )


def _json(raw: bytes, refusal: str) -> Any:
    try:
        return json.loads(raw, object_pairs_hook=_no_repeats)
    except (ValueError, RecursionError):
        raise IntegrityError(refusal) from None


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal keys; another reader may keep the first.
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key appears twice")
    return out


# Signatures: OpenSSH's own ssh-keygen -Y, run with files in a private temporary folder.


def _line(text: str) -> str:
    return " ".join(text.split())[:200]


def _short(value: object) -> str:
    return repr(value)[:80]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


__all__ = [
    "FORMAT",
    "MAX_BUNDLE_BYTES",
    "SIGNING_NAMESPACE",
    "Checked",
    "Evidence",
    "read_bundle",
    "write_bundle",
]

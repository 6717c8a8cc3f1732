"""Coordinator side; stdlib, msgspec (through receipts.py) and OpenSSH's ssh-keygen. The
evidence bundle of a verify: one file that binds the patch, both receipts of every box and the
verdict, optionally signed with `ssh-keygen -Y sign`, and re-checked by `verify-bundle`.

Format (`charpin-verify-bundle-v1`): an uncompressed POSIX tar with fixed metadata holding
`manifest.json`, `patch.diff`, `verdict.json`, `boxes/<n>/base.json`, `boxes/<n>/patched.json`
and, when signed, `manifest.json.sig`. The manifest names the base and patched commits, the
patch's sha256, the verdict and the sha256 of every other member; the signature covers the
manifest's bytes under the namespace `charpin-verify-v1`. Reading refuses anything that is not
exactly that: links, devices, absolute or `..` names, duplicates, extra or missing members,
hashes that differ, receipts of another commit or patch, a verdict that says something else.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charpin_runner.errors import IntegrityError, UsageError
from charpin_runner.receipt import MAX_RECEIPT_BYTES

from charpin_coordinator.receipts import load_receipt

FORMAT = "charpin-verify-bundle-v1"
SIGNING_NAMESPACE = "charpin-verify-v1"
MAX_BUNDLE_BYTES = 512 * 1024 * 1024
_MAX_SMALL = 16 * 1024 * 1024  # manifest, verdict, signature
_MAX_PATCH = 64 * 1024 * 1024
_OUTCOMES = ("ACCEPT", "REJECT", "INCOMPLETE")


@dataclass(frozen=True)
class Evidence:
    """What one verify found, to be bound into a bundle."""

    base: str
    patched: str
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
    signed: bool
    signer: str | None  # the principal, when the signature was verified


def write_bundle(path: Path, evidence: Evidence, *, sign_key: Path | None = None) -> None:
    """Write the bundle atomically (a temporary name, then rename); never over a file."""
    if path.exists():
        raise UsageError(f"{path} already exists; bundles are never overwritten, pick another")
    members: dict[str, bytes] = {"patch.diff": evidence.patch, "verdict.json": evidence.verdict}
    boxes = []
    for number, label in enumerate(sorted(evidence.receipts), 1):
        before, after = evidence.receipts[label]
        members[f"boxes/{number}/base.json"] = before
        members[f"boxes/{number}/patched.json"] = after
        boxes.append({"label": label, "folder": f"boxes/{number}"})
    manifest = {
        "format": FORMAT,
        "base": evidence.base,
        "patched": evidence.patched,
        "patch_sha256": _sha(evidence.patch),
        "outcome": evidence.outcome,
        "boxes": boxes,
        "files": {name: _sha(data) for name, data in sorted(members.items())},
    }
    manifest_bytes = json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n"
    ordered = [("manifest.json", manifest_bytes), *sorted(members.items())]
    if sign_key is not None:
        ordered.append(("manifest.json.sig", _sign(manifest_bytes, sign_key)))
    tmp = path.with_name(f".{path.name}.partial")
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in ordered:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 946728000
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
        tmp.rename(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror}; pass a writable path") from exc


def read_bundle(path: Path, *, allowed_signers: Path | None = None) -> Checked:
    """Re-check every member, binding and (with allowed_signers) the signature."""
    members = _members(path)
    manifest_bytes = members.pop("manifest.json", None)
    if manifest_bytes is None:
        raise IntegrityError(f"{path}: no manifest.json; this is not a charpin evidence bundle")
    try:
        manifest = json.loads(manifest_bytes)
    except ValueError:
        raise IntegrityError(f"{path}: manifest.json is not JSON; the bundle is refused") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IntegrityError(f"{path}: not a {FORMAT} bundle; the bundle is refused")
    signature = members.pop("manifest.json.sig", None)
    listed = manifest.get("files")
    if not isinstance(listed, dict) or set(listed) != set(members):
        extra = sorted(set(members) - set(listed or {}))
        missing = sorted(set(listed or {}) - set(members))
        raise IntegrityError(
            f"{path}: members differ from the manifest (extra {extra}, missing {missing}); "
            "the bundle is refused"
        )
    for name, data in sorted(members.items()):
        if _sha(data) != listed[name]:
            raise IntegrityError(
                f"{path}: {name} does not match its sha256 in the manifest; refused"
            )
    if _sha(members["patch.diff"]) != manifest.get("patch_sha256"):
        raise IntegrityError(f"{path}: patch.diff is not the patch the manifest names; refused")
    outcome = _check_verdict(path, manifest, members["verdict.json"])
    _check_receipts(path, manifest, members)
    signer = None
    if allowed_signers is not None:
        if signature is None:
            raise IntegrityError(
                f"{path}: the bundle is not signed, and --allowed-signers asks for it"
            )
        signer = _verify(manifest_bytes, signature, allowed_signers, path)
    return Checked(manifest, members["verdict.json"], outcome, signature is not None, signer)


def _members(path: Path) -> dict[str, bytes]:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}; pass an evidence bundle") from exc
    if size > MAX_BUNDLE_BYTES:
        raise IntegrityError(f"{path}: {size} bytes is over the {MAX_BUNDLE_BYTES}-byte cap")
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                name = member.name
                if not member.isfile():
                    raise IntegrityError(f"{path}: member {name!r} is not a regular file; refused")
                parts = name.split("/")
                if name.startswith("/") or ".." in parts or "" in parts or "\\" in name:
                    raise IntegrityError(f"{path}: member name {name!r} is unsafe; refused")
                if name in out:
                    raise IntegrityError(f"{path}: member {name!r} appears twice; refused")
                cap = _cap(name)
                if member.size > cap:
                    raise IntegrityError(f"{path}: member {name!r} is over its {cap}-byte cap")
                handle = tar.extractfile(member)
                data = handle.read() if handle is not None else b""
                if len(data) != member.size:
                    raise IntegrityError(f"{path}: member {name!r} is truncated; refused")
                out[name] = data
    except (tarfile.TarError, EOFError) as exc:
        raise IntegrityError(
            f"{path}: not a readable tar archive ({exc}); truncated? refused"
        ) from None
    return out


def _cap(name: str) -> int:
    if name.startswith("boxes/"):
        return MAX_RECEIPT_BYTES
    return _MAX_PATCH if name == "patch.diff" else _MAX_SMALL


def _check_verdict(path: Path, manifest: dict[str, Any], verdict: bytes) -> str:
    try:
        report = json.loads(verdict)
    except ValueError:
        raise IntegrityError(f"{path}: verdict.json is not JSON; refused") from None
    outcome = manifest.get("outcome")
    said = report.get("verdict") if isinstance(report, dict) else None
    if outcome not in _OUTCOMES or said != outcome:
        raise IntegrityError(
            f"{path}: the verdict says {said!r}, the manifest {outcome!r}; refused"
        )
    for key in ("base", "patched", "patch_sha256"):
        if report.get(key) != manifest.get(key):
            raise IntegrityError(f"{path}: the verdict's {key} is not the manifest's; refused")
    return str(outcome)


def _check_receipts(path: Path, manifest: dict[str, Any], members: dict[str, bytes]) -> None:
    boxes = manifest.get("boxes")
    if not isinstance(boxes, list):
        raise IntegrityError(f"{path}: the manifest lists no boxes; refused")
    for box in boxes:
        label, folder = str(box.get("label")), str(box.get("folder"))
        for side, commit in (("base", manifest.get("base")), ("patched", manifest.get("patched"))):
            name = f"{folder}/{side}.json"
            if name not in members:
                raise IntegrityError(f"{path}: {label}'s {side} receipt is missing; refused")
            receipt = load_receipt(members[name], source=f"{path}:{name}")
            ran = receipt.identity.head_before
            if ran != commit:
                raise IntegrityError(
                    f"{path}: {label}'s {side} receipt ran {ran[:12]}, not {str(commit)[:12]}; refused"
                )
            want = manifest.get("patch_sha256") if side == "patched" else None
            if receipt.identity.patch_sha256 != want:
                raise IntegrityError(
                    f"{path}: {label}'s {side} receipt was made for another patch; refused"
                )


def _keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise UsageError(
            "ssh-keygen is not installed; install openssh-client to sign or check bundles"
        )
    return found


def _sign(data: bytes, key: Path) -> bytes:
    with tempfile.TemporaryDirectory(prefix="charpin-sign-") as tmp:
        message = Path(tmp) / "manifest.json"
        message.write_bytes(data)
        done = subprocess.run(
            [_keygen(), "-Y", "sign", "-q", "-f", str(key), "-n", SIGNING_NAMESPACE, str(message)],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        signature = Path(f"{message}.sig")
        if done.returncode != 0 or not signature.is_file():
            reason = " ".join(done.stderr.decode("utf-8", "replace").split()) or "no reason given"
            raise UsageError(f"ssh-keygen could not sign with {key}: {reason}; pass a private key")
        return signature.read_bytes()


def _verify(data: bytes, signature: bytes, allowed: Path, path: Path) -> str:
    with tempfile.TemporaryDirectory(prefix="charpin-verify-sig-") as tmp:
        sig = Path(tmp) / "manifest.json.sig"
        sig.write_bytes(signature)
        found = subprocess.run(
            [_keygen(), "-Y", "find-principals", "-s", str(sig), "-f", str(allowed)],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        principals = found.stdout.decode("utf-8", "replace").split()
        if found.returncode != 0 or not principals:
            raise IntegrityError(f"{path}: the signature is by no key in {allowed}; refused")
        principal = principals[0]
        done = subprocess.run(
            [
                _keygen(),
                "-Y",
                "verify",
                "-f",
                str(allowed),
                "-I",
                principal,
                "-n",
                SIGNING_NAMESPACE,
                "-s",
                str(sig),
            ],
            input=data,
            capture_output=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise IntegrityError(f"{path}: the signature does not verify for {principal}; refused")
        return principal


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

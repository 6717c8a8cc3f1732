"""The evidence bundle: a round trip, signed with OpenSSH's `ssh-keygen -Y`, and tampered bundles
refused, each with one line saying what is wrong."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.verify.bundle import Evidence, read_bundle, write_bundle
from charpin_runner.errors import IntegrityError
from charpin_runner.receipt import Identity, dumps

from tests.receipt_factory import change, make_receipt

BASE, PATCHED, OTHER = "1" * 40, "3" * 40, "5" * 40
PATCH = b"diff --git a/x b/x\n"
SHA = __import__("hashlib").sha256(PATCH).hexdigest()


def receipt(commit: str, patch: str | None) -> bytes:
    identity = Identity(commit, commit, "2" * 40, "2" * 40, commit, patch, None)
    return dumps(change(make_receipt("clean"), identity=identity))


def evidence(**overrides: object) -> Evidence:
    verdict = json.dumps(
        {"verdict": "REJECT", "base": BASE, "patched": PATCHED, "patch_sha256": SHA}
    ).encode()
    fields: dict[str, object] = {
        "base": BASE,
        "patched": PATCHED,
        "patch": PATCH,
        "receipts": {"clean": (receipt(BASE, None), receipt(PATCHED, SHA))},
        "verdict": verdict,
        "outcome": "REJECT",
    }
    fields.update(overrides)
    return Evidence(**fields)  # type: ignore[arg-type]


def keypair(folder: Path, name: str) -> tuple[Path, str]:
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key, (folder / f"{name}.pub").read_text().strip()


def rewrite(source: Path, target: Path, change_member: dict[str, bytes | None]) -> None:
    """Copy a bundle, replacing (or with None dropping) members: what a tamperer does."""
    with tarfile.open(source) as old, tarfile.open(target, "w") as new:
        for member in old:
            handle = old.extractfile(member)
            data = handle.read() if handle else b""
            if member.name in change_member:
                replacement = change_member.pop(member.name)
                if replacement is None:
                    continue
                data = replacement
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))
        for name, data in change_member.items():
            if data is not None:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                new.addfile(info, io.BytesIO(data))


def test_an_unsigned_bundle_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "evidence.tar"
    write_bundle(path, evidence())
    checked = read_bundle(path)
    assert checked.outcome == "REJECT" and not checked.signed and checked.signer is None
    assert checked.manifest["patch_sha256"] == SHA
    assert main(["verify-bundle", str(path)]) == 0
    assert "checks · REJECT" in capsys.readouterr().out
    again = tmp_path / "again.tar"
    write_bundle(again, evidence())
    assert again.read_bytes() == path.read_bytes()  # deterministic: same evidence, same bytes


def test_a_signed_bundle_verifies_against_allowed_signers(tmp_path: Path) -> None:
    key, public = keypair(tmp_path, "reviewer")
    allowed = tmp_path / "allowed"
    allowed.write_text(f'reviewer@example namespaces="charpin-verify-v1" {public}\n')
    path = tmp_path / "evidence.tar"
    write_bundle(path, evidence(), sign_key=key)
    checked = read_bundle(path, allowed_signers=allowed)
    assert checked.signed and checked.signer == "reviewer@example"
    assert main(["verify-bundle", str(path), "--allowed-signers", str(allowed)]) == 0


def test_a_bundle_is_never_written_over_a_file(tmp_path: Path) -> None:
    path = tmp_path / "evidence.tar"
    path.write_text("keep me")
    with pytest.raises(Exception, match="already exists"):
        write_bundle(path, evidence())
    assert path.read_text() == "keep me"


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.tar"
    write_bundle(path, evidence())
    return path


def test_a_receipt_from_another_commit_is_refused(good: Path, tmp_path: Path) -> None:
    forged = tmp_path / "forged.tar"
    write_bundle(
        forged, evidence(receipts={"clean": (receipt(OTHER, None), receipt(PATCHED, SHA))})
    )
    with pytest.raises(IntegrityError, match="base receipt ran 555555555555, not 111111111111"):
        read_bundle(forged)


def test_a_receipt_for_another_patch_is_refused(tmp_path: Path) -> None:
    forged = tmp_path / "forged.tar"
    write_bundle(
        forged, evidence(receipts={"clean": (receipt(BASE, None), receipt(PATCHED, "9" * 64))})
    )
    with pytest.raises(IntegrityError, match="made for another patch"):
        read_bundle(forged)


def test_a_swapped_member_is_refused(good: Path, tmp_path: Path) -> None:
    swapped = tmp_path / "swapped.tar"
    rewrite(good, swapped, {"boxes/1/patched.json": receipt(PATCHED, SHA) + b" "})
    with pytest.raises(IntegrityError, match=r"boxes/1/patched\.json does not match its sha256"):
        read_bundle(swapped)


def test_a_changed_verdict_is_refused(good: Path, tmp_path: Path) -> None:
    changed = tmp_path / "changed.tar"
    verdict = json.dumps(
        {"verdict": "ACCEPT", "base": BASE, "patched": PATCHED, "patch_sha256": SHA}
    )
    rewrite(good, changed, {"verdict.json": verdict.encode()})
    with pytest.raises(IntegrityError, match=r"verdict\.json does not match"):
        read_bundle(changed)


def test_a_truncated_bundle_is_refused(good: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.tar"
    cut.write_bytes(good.read_bytes()[:3000])
    with pytest.raises(IntegrityError, match=r"truncated|not a readable tar|missing"):
        read_bundle(cut)


def test_a_traversing_member_is_refused(good: Path, tmp_path: Path) -> None:
    evil = tmp_path / "evil.tar"
    rewrite(good, evil, {"../escape": b"x"})
    with pytest.raises(IntegrityError, match="unsafe"):
        read_bundle(evil)
    assert not (tmp_path.parent / "escape").exists()


def test_a_resigned_manifest_by_a_stranger_is_refused(tmp_path: Path) -> None:
    key, public = keypair(tmp_path, "reviewer")
    stranger, _ = keypair(tmp_path, "stranger")
    allowed = tmp_path / "allowed"
    allowed.write_text(f'reviewer@example namespaces="charpin-verify-v1" {public}\n')
    signed = tmp_path / "signed.tar"
    write_bundle(signed, evidence(), sign_key=key)
    resigned = tmp_path / "resigned.tar"
    write_bundle(
        resigned,
        evidence(
            outcome="ACCEPT",
            verdict=json.dumps(
                {"verdict": "ACCEPT", "base": BASE, "patched": PATCHED, "patch_sha256": SHA}
            ).encode(),
        ),
        sign_key=stranger,
    )
    with pytest.raises(IntegrityError, match="by no key in"):
        read_bundle(resigned, allowed_signers=allowed)
    unsigned = tmp_path / "unsigned.tar"
    rewrite(signed, unsigned, {"manifest.json.sig": None})
    with pytest.raises(IntegrityError, match="not signed"):
        read_bundle(unsigned, allowed_signers=allowed)


def test_verify_bundle_refusal_is_one_line_and_exit_8(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.tar"
    cut.write_bytes(good.read_bytes()[:3000])
    assert main(["verify-bundle", str(cut)]) == 8
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("charpin-remote: error: ")

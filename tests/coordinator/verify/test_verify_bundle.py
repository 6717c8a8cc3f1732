"""The evidence bundle: round trips (unsigned and signed with OpenSSH's real `ssh-keygen -Y`), and
tampered bundles refused, each with one line naming what is wrong."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.verify.bundle import (
    MAX_BUNDLE_BYTES,
    Evidence,
    read_bundle,
    write_bundle,
)
from charpin_runner.errors import IntegrityError, UsageError
from charpin_runner.receipt import Identity, dumps

from tests.receipt_factory import change, make_receipt

BASE, PATCHED, OTHER = "1" * 40, "3" * 40, "5" * 40
PATCH = b"diff --git a/x b/x\n"
SHA = hashlib.sha256(PATCH).hexdigest()
WEIRD = ["we ird'$;box", "../x", "/etc/passwd", "a\nb", "ünïcode", "clean"]


def receipt(commit: str, patch: str | None, *, expected: str | None = None) -> bytes:
    identity = Identity(commit, commit, "2" * 40, "2" * 40, expected or commit, patch, None)
    return dumps(change(make_receipt("clean"), identity=identity))


def verdict(outcome: str = "REJECT", **fields: str) -> bytes:
    report = {"verdict": outcome, "base": BASE, "patched": PATCHED, "patch_sha256": SHA}
    return json.dumps({**report, **fields}, indent=2).encode()


def evidence(**overrides: Any) -> Evidence:
    fields: dict[str, Any] = {
        "base": BASE,
        "patched": PATCHED,
        "patch": PATCH,
        "receipts": {"clean": (receipt(BASE, None), receipt(PATCHED, SHA))},
        "verdict": verdict(),
        "outcome": "REJECT",
    }
    return Evidence(**{**fields, **overrides})


def keypair(folder: Path, name: str) -> tuple[Path, str]:
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key, (folder / f"{name}.pub").read_text().strip()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The reviewer (in allowed_signers) and a stranger (not)."""
    folder = tmp_path_factory.mktemp("keys")
    reviewer, public = keypair(folder, "reviewer")
    stranger, _ = keypair(folder, "stranger")
    allowed = folder / "allowed_signers"
    allowed.write_text(f'reviewer@example namespaces="charpin-verify-v1" {public}\n')
    return {"reviewer": reviewer, "stranger": stranger, "allowed": allowed}


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.tar"
    write_bundle(path, evidence())
    return path


@pytest.fixture
def signed(tmp_path: Path, keys: dict[str, Path]) -> Path:
    path = tmp_path / "signed.tar"
    write_bundle(path, evidence(), sign_key=keys["reviewer"])
    return path


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]


def write_tar(path: Path, entries: list[tuple[tarfile.TarInfo, bytes]]) -> None:
    with tarfile.open(path, "w") as tar:
        for info, data in entries:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


def file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def forge(
    source: Path,
    target: Path,
    replace: dict[str, bytes],
    *,
    rehash: bool = True,
    manifest: Callable[[dict[str, Any]], None] | None = None,
    sign_with: Path | None = None,
) -> None:
    """What a tamperer does: swap members, then (rehash) make the manifest's hashes fit them
    again, and (sign_with) sign that manifest with their own key, as `ssh-keygen -Y sign`."""
    content = {**members(source), **replace}
    if rehash or manifest is not None:
        data = json.loads(content["manifest.json"])
        sha = {n: hashlib.sha256(b).hexdigest() for n, b in content.items()}
        if rehash:
            data["verdict_sha256"], data["patch_sha256"] = sha["verdict.json"], sha["patch.diff"]
            for box in data["boxes"]:
                box["base_sha256"] = sha[f"{box['folder']}/base.json"]
                box["patched_sha256"] = sha[f"{box['folder']}/patched.json"]
        if manifest is not None:
            manifest(data)
        content["manifest.json"] = json.dumps(data, indent=1, sort_keys=True).encode()
    if sign_with is not None:
        message = target.with_name("manifest.json")
        message.write_bytes(content["manifest.json"])
        Path(f"{message}.sig").unlink(missing_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-Y", "sign", "-f", str(sign_with), "-n", "charpin-verify-v1",
             str(message)],
            check=True,
        )  # fmt: skip
        content["manifest.json.sig"] = Path(f"{message}.sig").read_bytes()
    write_tar(target, [(file(n), b) for n, b in content.items()])


def refused(path: Path, pattern: str, **kwargs: Any) -> str:
    with pytest.raises(IntegrityError, match=pattern) as caught:
        read_bundle(path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and message.endswith("refused"), message
    return message


# Round trips.


def test_an_unsigned_bundle_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "evidence.tar"
    write_bundle(path, evidence())
    checked = read_bundle(path)
    assert (checked.outcome, checked.signature, checked.signer) == ("REJECT", "absent", None)
    assert not checked.signed and checked.verdict == verdict()
    manifest = checked.manifest
    assert (manifest["base"], manifest["patched"], manifest["patch_sha256"]) == (BASE, PATCHED, SHA)
    assert manifest["verdict_sha256"] == hashlib.sha256(verdict()).hexdigest()
    [box] = manifest["boxes"]
    assert box["label"] == "clean"
    assert box["patched_sha256"] == hashlib.sha256(receipt(PATCHED, SHA)).hexdigest()
    with tarfile.open(path) as tar:
        listed = tar.getmembers()
    assert [m.name for m in listed] == [
        "manifest.json",
        "patch.diff",
        "verdict.json",
        "boxes/001-clean/base.json",
        "boxes/001-clean/patched.json",
    ]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.mode) for m in listed} == {
        (946684800, 0, 0, "", 0o644)
    }
    assert main(["verify-bundle", str(path)]) == 0
    assert "checks · REJECT" in capsys.readouterr().out
    again = tmp_path / "again.tar"
    write_bundle(again, evidence())
    assert again.read_bytes() == path.read_bytes()  # same evidence, same bytes


def test_box_folders_are_safe_for_any_label(tmp_path: Path) -> None:
    path = tmp_path / "weird.tar"
    receipts = {label: (receipt(BASE, None), receipt(PATCHED, SHA)) for label in WEIRD}
    write_bundle(path, evidence(receipts=receipts))
    names = [n for n in members(path) if n.startswith("boxes/")]
    assert len(names) == 2 * len(WEIRD)
    assert all(re.fullmatch(r"boxes/\d{3}-[A-Za-z0-9_-]+/(base|patched)\.json", n) for n in names)
    assert names[:2] == ["boxes/001-x/base.json", "boxes/001-x/patched.json"]  # from "../x"
    checked = read_bundle(path)
    assert [b["label"] for b in checked.manifest["boxes"]] == sorted(WEIRD)


def test_a_signed_bundle_verifies_against_allowed_signers(
    signed: Path, keys: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert "manifest.json.sig" in members(signed)
    checked = read_bundle(signed, allowed_signers=keys["allowed"])
    assert (checked.signature, checked.signer, checked.signed) == (
        "verified",
        "reviewer@example",
        True,
    )
    assert main(["verify-bundle", str(signed), "--allowed-signers", str(keys["allowed"])]) == 0
    assert "signed by reviewer@example" in capsys.readouterr().out


def test_a_signature_without_allowed_signers_is_present_but_unchecked(signed: Path) -> None:
    checked = read_bundle(signed)
    assert (checked.signature, checked.signer, checked.signed) == ("unchecked", None, True)


# Writing refuses.


def test_a_bundle_is_never_written_over_a_file(tmp_path: Path) -> None:
    path = tmp_path / "evidence.tar"
    path.write_text("keep me")
    with pytest.raises(UsageError, match="already exists"):
        write_bundle(path, evidence())
    assert path.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evidence.tar"]


def test_inconsistent_evidence_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "evidence.tar"
    wrong = {"clean": (receipt(OTHER, None), receipt(PATCHED, SHA))}
    with pytest.raises(IntegrityError, match=r"refusing to write .*base receipt ran 555555555555"):
        write_bundle(path, evidence(receipts=wrong))
    huge = {"x" * (5 * 1024 * 1024): (receipt(BASE, None), receipt(PATCHED, SHA))}
    with pytest.raises(IntegrityError, match=r"manifest\.json is over its 4194304-byte cap"):
        write_bundle(path, evidence(receipts=huge))  # read_bundle would refuse it
    with pytest.raises(IntegrityError, match="'ACCEPT', the manifest 'REJECT'"):
        write_bundle(path, evidence(verdict=verdict("ACCEPT")))
    assert list(tmp_path.iterdir()) == []


def test_a_key_ssh_keygen_rejects_is_refused_with_its_reason(
    tmp_path: Path, keys: dict[str, Path]
) -> None:
    loose = tmp_path / "loose"
    loose.write_bytes(keys["reviewer"].read_bytes())
    loose.chmod(0o644)
    with pytest.raises(UsageError, match=r"ssh-keygen cannot sign with .*too open") as caught:
        write_bundle(tmp_path / "a.tar", evidence(), sign_key=loose)
    assert "\n" not in str(caught.value)
    with pytest.raises(UsageError, match="cannot read signing key"):
        write_bundle(tmp_path / "b.tar", evidence(), sign_key=tmp_path / "nope")
    assert not (tmp_path / "a.tar").exists() and not (tmp_path / "b.tar").exists()


def test_without_ssh_keygen_the_fix_is_named(
    tmp_path: Path, signed: Path, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(UsageError, match="install openssh-client"):
        write_bundle(tmp_path / "x.tar", evidence(), sign_key=keys["reviewer"])
    with pytest.raises(UsageError, match="install openssh-client"):
        read_bundle(signed, allowed_signers=keys["allowed"])


# Tampered bundles are refused.


def test_a_receipt_from_another_commit_is_refused(good: Path, tmp_path: Path) -> None:
    forged = tmp_path / "forged.tar"
    forge(good, forged, {"boxes/001-clean/base.json": receipt(OTHER, None)})
    refused(forged, r"box 'clean': the base receipt ran 555555555555, not the manifest's base 1111")


def test_receipts_swapped_between_base_and_patched_are_refused(good: Path, tmp_path: Path) -> None:
    content = members(good)
    forged = tmp_path / "forged.tar"
    forge(
        good,
        forged,
        {
            "boxes/001-clean/base.json": content["boxes/001-clean/patched.json"],
            "boxes/001-clean/patched.json": content["boxes/001-clean/base.json"],
        },
    )
    refused(forged, "the base receipt ran 333333333333, not the manifest's base")


def test_a_receipt_for_another_patch_is_refused(good: Path, tmp_path: Path) -> None:
    forged = tmp_path / "forged.tar"
    forge(good, forged, {"boxes/001-clean/patched.json": receipt(PATCHED, "9" * 64)})
    refused(forged, "the patched receipt was made for patch '9999.*another patch's receipt")


def test_a_receipt_asked_to_run_another_commit_is_refused(good: Path, tmp_path: Path) -> None:
    forged = tmp_path / "forged.tar"
    forge(good, forged, {"boxes/001-clean/base.json": receipt(BASE, None, expected=OTHER)})
    refused(forged, "the base receipt was asked to run '5555")


def test_a_modified_verdict_is_refused(good: Path, tmp_path: Path) -> None:
    changed = tmp_path / "changed.tar"
    forge(good, changed, {"verdict.json": verdict("ACCEPT")}, rehash=False)
    refused(changed, r"verdict\.json does not match its sha256 in the manifest")


def test_a_verdict_saying_something_else_than_the_manifest_is_refused(
    good: Path, tmp_path: Path
) -> None:
    changed = tmp_path / "changed.tar"
    forge(good, changed, {"verdict.json": verdict("ACCEPT")})
    refused(changed, r"verdict\.json says 'ACCEPT', the manifest 'REJECT'")
    other = tmp_path / "other.tar"
    forge(good, other, {"verdict.json": verdict(base=OTHER)})
    refused(other, r"verdict\.json's base is '5555.*judged something else")


def test_a_changed_patch_is_refused(good: Path, tmp_path: Path) -> None:
    changed = tmp_path / "changed.tar"
    forge(good, changed, {"patch.diff": PATCH + b"+evil\n"}, rehash=False)
    refused(changed, r"patch\.diff does not match its sha256")


def _cuts(path: Path) -> dict[str, int]:
    with tarfile.open(path) as tar:
        listed = tar.getmembers()
    second = listed[1]
    boundary = second.offset_data + -(-second.size // 512) * 512
    last = listed[-1]
    end = last.offset_data + -(-last.size // 512) * 512
    return {
        "inside a member": listed[0].offset_data + 10,
        "inside a header": boundary + 100,
        "at a member boundary": boundary,
        "before the end marker": end,
        "inside the end marker": end + 600,
    }


@pytest.mark.parametrize(
    "where",
    [
        "inside a member",
        "inside a header",
        "at a member boundary",
        "before the end marker",
        "inside the end marker",
    ],
)
def test_a_truncated_bundle_is_refused(good: Path, tmp_path: Path, where: str) -> None:
    cut = tmp_path / "cut.tar"
    cut.write_bytes(good.read_bytes()[: _cuts(good)[where]])
    refused(cut, "truncated")


def test_data_after_the_end_marker_is_refused(good: Path, tmp_path: Path) -> None:
    longer = tmp_path / "longer.tar"
    longer.write_bytes(good.read_bytes() + b"hidden")
    refused(longer, "data after its last member")


def _link(kind: bytes, name: str = "patch.diff") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, "/etc/passwd"
    return info


@pytest.mark.parametrize(
    ("extra", "pattern"),
    [
        ((file("../escape"), b"x"), r"member name '\.\./escape' is unsafe"),
        ((file("boxes/../../escape"), b"x"), r"member name 'boxes/\.\./\.\./escape' is unsafe"),
        ((file("/tmp/escape"), b"x"), r"member name '/tmp/escape' is unsafe"),
        ((_link(tarfile.SYMTYPE, "notes"), b""), "'notes' is a symbolic link"),
        ((_link(tarfile.LNKTYPE, "notes"), b""), "'notes' is a hard link"),
        ((_link(tarfile.CHRTYPE, "notes"), b""), "'notes' is a character device"),
        ((_link(tarfile.DIRTYPE, "boxes"), b""), "'boxes' is a directory"),
        ((file("patch.diff"), PATCH), "member 'patch.diff' appears twice"),
        ((file("notes.txt"), b"x"), r"extra \['notes\.txt'\], missing \[\]"),
    ],
)
def test_a_bad_member_is_refused(
    good: Path, tmp_path: Path, extra: tuple[tarfile.TarInfo, bytes], pattern: str
) -> None:
    evil = tmp_path / "evil.tar"
    write_tar(evil, [*((file(n), b) for n, b in members(good).items()), extra])
    refused(evil, pattern)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.tar", "good.tar"]


def test_a_missing_member_is_refused(good: Path, tmp_path: Path) -> None:
    short = tmp_path / "short.tar"
    content = members(good)
    del content["boxes/001-clean/patched.json"]
    write_tar(short, [(file(n), b) for n, b in content.items()])
    refused(short, r"missing \['boxes/001-clean/patched\.json'\]")


def test_a_manifest_pointing_a_box_elsewhere_is_refused(good: Path, tmp_path: Path) -> None:
    def elsewhere(data: dict[str, Any]) -> None:
        data["boxes"][0]["folder"] = "boxes/../../x"

    forged = tmp_path / "forged.tar"
    forge(good, forged, {}, manifest=elsewhere)
    refused(forged, "box 1's folder")


def test_a_manifest_with_a_repeated_key_is_refused(good: Path, tmp_path: Path) -> None:
    forged = tmp_path / "forged.tar"
    text = members(good)["manifest.json"].decode()
    twice = text.replace('"outcome"', '"outcome": "ACCEPT",\n "outcome"', 1)
    forge(good, forged, {"manifest.json": twice.encode()}, rehash=False)
    refused(forged, r"not a charpin-verify-bundle-v1 manifest \(bad JSON\)")


def test_an_oversized_archive_or_member_is_refused(good: Path, tmp_path: Path) -> None:
    huge = tmp_path / "huge.tar"
    with open(huge, "wb") as handle:
        handle.truncate(MAX_BUNDLE_BYTES + 1)  # sparse: nothing is written
    refused(huge, "over the 536870912-byte bundle cap")
    fat = tmp_path / "fat.tar"
    forge(good, fat, {"manifest.json.sig": b"x" * 70_000}, rehash=False)
    refused(fat, r"member 'manifest\.json\.sig' is over its 65536-byte cap")


# Signatures that do not hold.


def test_an_unsigned_bundle_is_refused_when_signers_are_given(
    good: Path, keys: dict[str, Path]
) -> None:
    refused(good, "not signed and allowed signers were given", allowed_signers=keys["allowed"])


def test_a_bundle_resigned_by_a_stranger_is_refused(
    signed: Path, tmp_path: Path, keys: dict[str, Path]
) -> None:
    resigned = tmp_path / "resigned.tar"
    forge(
        signed,
        resigned,
        {"verdict.json": verdict("ACCEPT")},
        manifest=lambda data: data.update(outcome="ACCEPT"),
        sign_with=keys["stranger"],
    )
    assert read_bundle(resigned).outcome == "ACCEPT"  # consistent: only a signature can tell
    refused(resigned, "the signature is by no key in", allowed_signers=keys["allowed"])


def test_a_manifest_changed_under_the_reviewers_signature_is_refused(
    signed: Path, tmp_path: Path, keys: dict[str, Path]
) -> None:
    changed = tmp_path / "changed.tar"
    forge(  # new hashes for a new verdict, the reviewer's old signature kept
        signed,
        changed,
        {"verdict.json": verdict("ACCEPT")},
        manifest=lambda data: data.update(outcome="ACCEPT"),
    )
    refused(
        changed,
        r"the signature does not verify for 'reviewer@example' over manifest\.json",
        allowed_signers=keys["allowed"],
    )


def test_a_signature_for_another_namespace_is_refused(
    tmp_path: Path, signed: Path, keys: dict[str, Path]
) -> None:
    public = keys["reviewer"].with_name("reviewer.pub").read_text().strip()
    elsewhere = tmp_path / "allowed_git"
    elsewhere.write_text(f'reviewer@example namespaces="git" {public}\n')
    refused(signed, "does not verify for 'reviewer@example'", allowed_signers=elsewhere)


def test_verify_bundle_refusal_is_one_line_and_exit_8(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.tar"
    cut.write_bytes(good.read_bytes()[:3000])
    assert main(["verify-bundle", str(cut)]) == 8
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("charpin-remote: error: ")

"""Coordinator side; stdlib and OpenSSH's ssh-keygen only. Signing the evidence bundle's manifest
with `ssh-keygen -Y sign` and checking a signature against an allowed_signers file."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from charpin_runner.errors import IntegrityError, UsageError

from charpin_coordinator.verify.bundletar import MANIFEST, SIGNATURE

SIGNING_NAMESPACE = "charpin-verify-v1"
_KEYGEN_SECONDS = 120  # long enough to type a key's passphrase at ssh-keygen's prompt


def keygen() -> str:
    """The ssh-keygen on PATH; UsageError naming the package when there is none."""
    found = shutil.which("ssh-keygen")
    if found is None:
        raise UsageError(
            "ssh-keygen is not on PATH; install openssh-client to sign or check bundles"
        )
    return found


def run_keygen(argv: list[str], data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        # No stdin when there is no data: ssh-keygen would read a passphrase or message from it.
        return subprocess.run(
            argv,
            input=data,
            stdin=subprocess.DEVNULL if data is None else None,
            capture_output=True,
            timeout=_KEYGEN_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"ssh-keygen -Y {argv[2]} did not finish in {_KEYGEN_SECONDS}s; "
            "use an unencrypted key or one in ssh-agent"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot run ssh-keygen: {exc.strerror}; install openssh-client") from exc


def sign(manifest: bytes, key: Path) -> bytes:
    if not key.is_file():
        raise UsageError(f"cannot read signing key {key}; pass an SSH private key file")
    with tempfile.TemporaryDirectory(prefix="charpin-sign-") as tmp:
        message = Path(tmp) / MANIFEST
        message.write_bytes(manifest)
        argv = [keygen(), "-Y", "sign", "-f", str(key), "-n", SIGNING_NAMESPACE, str(message)]
        done = run_keygen(argv)
        signature = Path(tmp) / SIGNATURE
        if done.returncode != 0 or not signature.is_file():
            raise UsageError(
                f"ssh-keygen cannot sign with {key}: {reason(done.stderr)}; "
                "pass a usable SSH private key (mode 600)"
            )
        return signature.read_bytes()


def verify_signature(manifest: bytes, signature: bytes, allowed: Path, where: str) -> str:
    with tempfile.TemporaryDirectory(prefix="charpin-check-") as tmp:
        sig = Path(tmp) / SIGNATURE
        sig.write_bytes(signature)
        ssh_keygen = keygen()
        # find-principals only matches the signature's key against the list; -Y verify then
        # checks the signature over the manifest's bytes, the namespace and the key's options.
        found = run_keygen([ssh_keygen, "-Y", "find-principals", "-s", str(sig), "-f", str(allowed)])
        principals = found.stdout.decode("utf-8", "replace").split("\n")
        principal = principals[0].strip()
        if found.returncode != 0 or not principal:
            raise IntegrityError(
                f"{where}: the signature is by no key in {allowed} ({reason(found.stderr)}); "
                "refused"
            )
        done = run_keygen(
            [ssh_keygen, "-Y", "verify", "-f", str(allowed), "-I", principal,
             "-n", SIGNING_NAMESPACE, "-s", str(sig)],
            manifest,
        )  # fmt: skip
        if done.returncode != 0:
            raise IntegrityError(
                f"{where}: the signature does not verify for {principal!r} over {MANIFEST} "
                f"({reason(done.stderr)}); refused"
            )
        return principal


def reason(stderr: bytes) -> str:
    """ssh-keygen's one line worth showing: not its @@@ banners, prompts or progress lines."""
    for line in stderr.decode("utf-8", "replace").splitlines():
        text = " ".join(line.replace("Enter passphrase:", "").split())
        if text and not text.startswith("@") and not text.startswith(("Signing", "Write")):
            return text[:300]
    return "no reason given"

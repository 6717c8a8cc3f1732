"""Coordinator side; reaches boxes through Transport (the SSH stack loads only for SSH boxes).

`charpin-remote hosts gc`: what charpin keeps on each box (venvs, cache repositories, runner
folders, run folders of interrupted runs) and what is freed to bring it under the cap, or with
dry_run what would be. The box's agent does the collecting (charpin_runner.caches.collect),
under the same locks and leases as every run, so nothing a live run uses is ever removed.
Returns data; the CLI prints it.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from charpin_coordinator.remote.builtin import clean_cache_home
from charpin_coordinator.remote.bundle import runner_bundle
from charpin_coordinator.remote.errors import BoxError
from charpin_coordinator.remote.hosts import HostSpec
from charpin_coordinator.remote.session import BoxSession, shipped_agent
from charpin_coordinator.remote.transport import LocalTransport, Transport

GC_TIMEOUT: Final = 120.0


@dataclass(frozen=True)
class GcResult:
    """One box: the agent's collection report, or why the box could not be collected."""

    host: str
    report: dict[str, Any] | None = None
    error: str | None = None
    kind: str | None = None
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "ok": self.ok,
            "error": self.error,
            "kind": self.kind,
            "note": self.note,
            "report": self.report,
        }


def gc_box(
    transport: Transport,
    *,
    python: str,
    cap: Mapping[str, Any],
    dry_run: bool,
    timeout: float = GC_TIMEOUT,
) -> dict[str, Any]:
    """Run one collection through the box's agent (placing the runner as a run would)."""
    runner = runner_bundle()
    session = BoxSession.start(
        transport,
        shipped_agent(python, transport.home, runner),
        python=python,
        runner=runner,
        timeout=timeout,
    )
    try:
        report, _ = session.call("gc", {"cap": dict(cap), "dry_run": dry_run}, timeout=timeout)
    finally:
        session.close()
    report.pop("ok", None)
    return report


def gc_hosts(
    specs: Sequence[HostSpec],
    *,
    cap: Mapping[str, Any],
    dry_run: bool,
    accept_new: bool = False,
) -> list[GcResult]:
    """Collect each box in order; cap's keys beat each host's configured cap. An unreachable
    box is a failed result, never an exception."""
    results = []
    for spec in specs:
        wanted = {**spec.extras.cache_cap(), **cap}
        if spec.builtin and spec.name == "local":
            note = "local runs the working tree in place and keeps no caches"
            results.append(GcResult(host=spec.name, note=note))
            continue
        if spec.extras.provision:
            note = "a disposable server, made and removed for each run: nothing to collect"
            results.append(GcResult(host=spec.name, note=note))
            continue
        try:
            if spec.builtin:
                with tempfile.TemporaryDirectory(prefix="charpin-gc-") as tmp:
                    local = LocalTransport(spec.name, Path(tmp), home=str(clean_cache_home()))
                    python = spec.extras.python or sys.executable
                    report = gc_box(local, python=python, cap=wanted, dry_run=dry_run)
            else:
                from charpin_coordinator.remote.ssh import open_box

                with open_box(spec, accept_new=accept_new) as box:
                    python = spec.extras.python or "python3"
                    report = gc_box(box, python=python, cap=wanted, dry_run=dry_run)
        except BoxError as exc:
            results.append(GcResult(host=spec.name, error=str(exc), kind=exc.kind))
            continue
        results.append(GcResult(host=spec.name, report=report))
    return results


def describe(result: GcResult) -> list[str]:
    """The lines `hosts gc` prints for one box."""
    tag = f"[{result.host}]"
    if result.note is not None:
        return [f"{tag} {result.note}"]
    if result.error is not None or result.report is None:
        return [f"{tag} BAD {result.error}"]
    report = result.report
    cap = report.get("cap") or {}
    lines = [
        f"{tag} {_size(report.get('bytes_before', 0))} in {report.get('root')}; cap "
        f"{cap.get('max_mb')} MB, entries unused for {cap.get('max_days')} days"
    ]
    removed = report.get("removed") or []
    verb = "would free" if report.get("dry_run") else "freed"
    freed = sum(int(item.get("bytes", 0)) for item in removed)
    lines.append(f"{tag} {verb} {_size(freed)} ({len(removed)} item(s))")
    for item in removed:
        lines.append(f"{tag}   {item['kind']}/{item['name']} {_size(item['bytes'])}: {item['why']}")
    for item in report.get("in_use") or []:
        lines.append(f"{tag}   in use, kept: {item['kind']}/{item['name']} {_size(item['bytes'])}")
    left = "would be left" if report.get("dry_run") else "left"
    lines.append(f"{tag} {_size(report.get('bytes_after', 0))} {left}")
    return lines


def _size(count: object) -> str:
    value = float(count) if isinstance(count, (int, float)) else 0.0
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"

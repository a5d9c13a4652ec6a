"""Device results: a file's runs on devices, the one to reuse, and each device's last run."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from farm.lineage.models import DeviceResult
from farm.lineage.queries.common import prebuilt
from farm.results import DeviceRecord


def device_result_dict(r: DeviceResult) -> dict[str, Any]:
    """A device_results row as every reader gets it (farm/results.py DeviceRecord)."""
    return DeviceRecord.model_validate(r).view()


def device_results(session: Session, sha: str) -> list[dict[str, Any]]:
    rows = session.scalars(_q_device_results(), {"sha": sha})
    return [device_result_dict(r) for r in rows]


@prebuilt
def _q_device_results() -> Any:
    return select(DeviceResult).where(DeviceResult.artifact_sha256 == bindparam("sha")).order_by(DeviceResult.id)


def reusable_device_result(session: Session, sha: str, device_id: str, accelerator: str, protocol: dict[str, Any],
                           runtime_version: str | None, cpu_class: str | None = None,
                           host: str | None = None) -> dict[str, Any] | None:
    """The newest result of these bytes on this device and accelerator, under this protocol (and
    this runtime release, when the caller knows which will run; and this CPU class on this host, for
    a device that is one: speed is the machine's, not only the class's), that a build may reuse
    instead of measuring again: a verified run, or a recorded decision that the file does not fit.
    A failed run is never reused (the next build tries again)."""
    q = (select(DeviceResult).where(DeviceResult.artifact_sha256 == sha, DeviceResult.device_id == device_id,
                                    DeviceResult.accelerator == accelerator,
                                    DeviceResult.status.in_(("verified", "does_not_fit")))
         .order_by(DeviceResult.id.desc()))
    if cpu_class is not None:
        q = q.where(DeviceResult.cpu_class == cpu_class)
    if host is not None:
        q = q.where(DeviceResult.host == host)
    for row in session.scalars(q):
        if row.protocol != protocol:
            continue
        if runtime_version is not None and row.status == "verified" and row.runtime_version != runtime_version:
            continue
        return device_result_dict(row)
    return None


def device_results_of_run(session: Session, flow_run_id: str) -> list[dict[str, Any]]:
    """The device results a (bench-one) flow run recorded."""
    rows = session.scalars(select(DeviceResult).where(DeviceResult.flow_run_id == flow_run_id).order_by(DeviceResult.id))
    return [device_result_dict(r) for r in rows]


def largest_peak_mb(session: Session, sha: str) -> float | None:
    """The largest peak memory measured for this file on any device."""
    from sqlalchemy import func

    return session.scalar(select(func.max(DeviceResult.peak_mem_mb)).where(DeviceResult.artifact_sha256 == sha))


def last_device_runs(session: Session) -> dict[str, dict[str, Any]]:
    """Each device's most recent run (any file), for `farm devices`."""
    out: dict[str, dict[str, Any]] = {}
    for r in session.scalars(select(DeviceResult).order_by(DeviceResult.id)):
        out[r.device_id] = device_result_dict(r)
    return out

"""The result records: what a gate or a device run measured, on which bytes, where and when.

One type per kind of result, declared once and used from the measurement to its readers: the gate
suite builds a `GateRecord` from the toolchain's answer (farm_common/commands.py `GateAnswer`) and
the class it ran on, lineage stores exactly its fields (farm/lineage/record.py) and reads rows back
through it (farm/lineage/queries/), and what the cards, the API, `--json` and revalidation read is
its `view()`. The bench builds a `DeviceRecord` the same way. Both carry where the runtime ran
(`RanOn`: the host, the CPU class key its process saw, the whole view), the part the reuse keys,
the cards' CPU-class rows and the hosts' lineage lines are read from.

Before this, each shape was restated as a field list in three or four places (the suite's values,
the bench's RESULT_COLUMNS, the queries' dicts, DEVICE_FIELDS) and a field added to one was lost
between the others."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_serializer, field_validator

from farm_common.wire import Status


class RanOn(BaseModel):
    """Where a result's runtime ran (issues 34, 35): the host, the CPU class key its process reported
    and the whole view (label, features, how it was presented). The device is each record's own
    field (a gate's `device`, a benchmark's `device_id`: a CPU class is a device)."""

    model_config = ConfigDict(extra="forbid", from_attributes=True)

    host: str | None = None
    cpu_class: str | None = None
    cpu: dict[str, Any] | None = None


class _Record(RanOn):
    id: int | None = None  # lineage's row id, once recorded
    artifact_sha256: str
    runtime: str | None = None
    runtime_version: str | None = None
    evidence: list[Any] = []
    flow_run_id: str | None = None
    started_at: datetime
    finished_at: datetime

    @field_validator("evidence", "metrics", "findings", "config", "env", "protocol", mode="before", check_fields=False)
    @classmethod
    def _null_is_empty(cls, v: Any, info: ValidationInfo) -> Any:
        # A JSON column written as NULL by an older farm reads as its empty default, not a failure.
        return cls.model_fields[info.field_name].get_default(call_default_factory=True) if v is None else v

    @field_validator("started_at", "finished_at")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        # Lineage writes UTC; SQLite hands it back without its zone. One form for every reader.
        return v.replace(tzinfo=timezone.utc) if v.tzinfo is None else v

    @field_serializer("started_at", "finished_at", when_used="json")
    def _iso(self, v: datetime) -> str:
        return v.isoformat()  # as lineage has always written them (not pydantic's "Z")

    def row(self) -> dict[str, Any]:
        """The columns lineage stores (farm/lineage/record.py)."""
        return self.model_dump(exclude={"id"})

    def view(self) -> dict[str, Any]:
        """What every reader gets: JSON-ready, times as ISO 8601."""
        return self.model_dump(mode="json")

    def recorded(self, row_id: int) -> "_Record":
        return self.model_copy(update={"id": row_id})


class GateRecord(_Record):
    """One gate run on the exact bytes of one artifact (lineage's gate_results row)."""

    gate: str
    gate_version: int
    kind: str
    status: Status
    runtime: str
    runtime_version: str
    backend: str
    device: str
    replies: list[dict[str, Any]] | None = None
    metrics: dict[str, Any] = {}
    findings: list[Any] = []
    config: dict[str, Any] = {}
    inputs: dict[str, Any] | None = None
    request_digest: str | None = None
    toolchain_id: str | None = None
    recheck_id: int | None = None

    @classmethod
    def from_answer(cls, answer: dict[str, Any], **fields: Any) -> "GateRecord":
        """The record of a toolchain gate answer (its contract: farm_common/commands.py GateAnswer)
        with the fields only the orchestrator knows (the bytes, the gate, where it ran, when)."""
        runtime = answer.get("runtime") or {}
        return cls(status=answer["status"], metrics=answer.get("metrics", {}), evidence=answer.get("evidence", []),
                   findings=answer.get("findings", []), replies=answer.get("replies"),
                   runtime=runtime.get("package", "litert-lm-api"), runtime_version=runtime.get("version", "unknown"),
                   backend=answer.get("backend", "cpu"), **fields)


class DeviceRecord(_Record):
    """One benchmark of one artifact on one device and accelerator (lineage's device_results row)."""

    device_id: str
    accelerator: str
    status: str  # verified | failed | does_not_fit | host_down (farm/devices/parse.py)
    failure_class: str | None = None
    prefill_tokens: int
    decode_tokens: int
    runs: int
    cache_mode: str | None = None
    prefill_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None
    ttft_ms: float | None = None
    init_ms: float | None = None
    peak_mem_mb: float | None = None
    delegated_ops: int | None = None
    total_ops: int | None = None
    full_delegation: bool | None = None
    context_length: int | None = None
    env: dict[str, Any] = {}
    protocol: dict[str, Any] = {}

"""A crafted lineage for card and publishing tests (SQLite, a local store): a model `tiny` whose
files are added one by one into one chain, with gate and device results."""

from __future__ import annotations

import hashlib
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

from farm.cards.facts import model_facts
from farm.cards.publish import compose
from farm.lineage.db import Database
from farm.lineage.models import Artifact
from farm.lineage.record import (
    record_artifact,
    record_device_result,
    record_gate_result,
    record_recipe,
    record_sections,
    record_source,
    record_toolchain,
)

DEVICES = {"local-cpu": {"name": "this host, CPU", "soc": "x86_64", "os": "Debian 12", "ram_mb": 16000},
           "pixel-8": {"name": "Pixel 8", "soc": "Tensor G3", "os": "Android 14", "ram_mb": 8192}}
T0 = datetime(2026, 10, 11, 9, 0, tzinfo=timezone.utc)
WARN = ("one Engine per conversation: a conversation on a used Engine answers differently (3 of 7 pairs differ); "
        "declared: litert-lm does not reset a used Engine")


def h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Lineage:
    """A crafted lineage: a model `tiny` whose files are added one by one into one chain."""

    def __init__(self, tmp_path: Path, source_kind: str = "generated", url: str | None = None):
        from farm.store.local import LocalStore

        self.db = Database(url or f"sqlite:///{tmp_path / 'lineage.db'}")
        self.res = SimpleNamespace(db=self.db, store=LocalStore(tmp_path / "store"), settings=SimpleNamespace(
            work_dir=tmp_path / "work"))
        self.day = 0
        with self.db.session() as s:
            self.tc = record_toolchain(s, {"freeze_sha256": h("freeze"), "python": "3.11.7", "freeze": "x==1",
                                           "packages": {"litert-torch": "0.10.0", "ai-edge-quantizer": "0.10.0",
                                                        "litert-lm-builder": "0.10.0", "litert-lm": "0.18.1"}})
            spec = {"kind": source_kind, "family": "qwen3_5", "seed": 0}
            self.src = record_source(s, id=h("src"), kind=source_kind, name="tiny", family="qwen3_5",
                                     repo_id="Org/tiny" if source_kind == "hf" else None,
                                     revision="abc123" if source_kind == "hf" else None, path="/m", spec=spec,
                                     files=[], tokenizer_sha256=h("tok"))
            self.recipe = record_recipe(s, h("recipe"), "r", {"name": "r", "description": "int8 weights"}, [])
            record_artifact(s, sha256=h("float"), kind="float_tflite", size=100, uri="file:///f", source_id=self.src,
                            toolchain_id=self.tc, details={"export_config": {}, "converter": {}})

    def file(self, tag: str, tflite: str, tok: str = "tok", meta: str = "meta",
             command: str | None = "farm build examples/tiny.yaml --recipe r", fixes: list | None = None,
             content: bytes | None = None, details: dict | None = None) -> str:
        """A new current file of `tiny/r` with these section contents; `content`: real bytes, put in
        the store (the file's sha256 and size are theirs)."""
        self.day += 1
        sha, size, uri = h(f"bundle-{tag}"), 1000 + self.day, "file:///b"
        if content is not None:
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / "f").write_bytes(content)
                ref = self.res.store.put_file(Path(tmp) / "f")
            sha, size, uri = ref.sha256, ref.size, ref.uri
        with self.db.session() as s:
            record_artifact(s, sha256=h(tflite), kind="quantized_tflite", size=40, uri="file:///q", source_id=self.src,
                            toolchain_id=self.tc, recipe_digest=self.recipe, inputs={"float_model": h("float")})
            if s.get(Artifact, h(f"tokenizer-{tok}")) is None:
                record_artifact(s, sha256=h(f"tokenizer-{tok}"), kind="tokenizer", size=20, uri="file:///t",
                                source_id=self.src)
            record_artifact(s, sha256=sha, kind="litertlm", size=size, uri=uri,
                            name="tiny_r.litertlm", chain="tiny/r", model_id="tiny", source_id=self.src, toolchain_id=self.tc,
                            recipe_digest=self.recipe, inputs={"model": h(tflite), "tokenizer": h(f"tokenizer-{tok}")},
                            created_at=T0 + timedelta(days=self.day),
                            details={"metadata": {"prefill_lengths": [8], "cache_length": 64},
                                     "build_command": command, **({"fixes": fixes} if fixes else {}),
                                     "card": {"license": None, "task": "text-generation", "source_url": None},
                                     **(details or {})})
            s.flush()
            record_sections(s, sha, [
                {"index": 0, "type": "LlmMetadataProto", "offset": 16384, "size": 10, "sha256": h(meta)},
                {"index": 1, "type": "HF_Tokenizer_Zlib", "offset": 32768, "size": 20, "sha256": h("z" + tok)},
                {"index": 2, "type": "TFLiteModel", "offset": 49152, "size": 40, "sha256": h(tflite)},
            ])
        return sha

    def gate(self, sha: str, gate: str, status: str = "pass", findings: list | None = None, **extra) -> int:
        extra.setdefault("toolchain_id", self.tc)
        with self.db.session() as s:
            return record_gate_result(
                s, artifact_sha256=sha, gate=gate, gate_version=1, kind="parity", status=status, runtime="litert-lm-api",
                runtime_version=extra.pop("runtime_version", "0.18.1"), backend="cpu", device=extra.pop("device", "cpu"),
                metrics=extra.pop("metrics", {"prompts": 4}),
                evidence=[], findings=findings or [], config=extra.pop("config", {}),
                started_at=T0 + timedelta(days=self.day), finished_at=T0 + timedelta(days=self.day), **extra)

    def device(self, sha: str, device: str = "local-cpu", status: str = "verified", **extra) -> int:
        figures = {"prefill_tokens_per_s": 812.5, "decode_tokens_per_s": 95.25, "ttft_ms": 310.0, "init_ms": 120.0,
                   "peak_mem_mb": 300.0} if status == "verified" else {}
        with self.db.session() as s:
            return record_device_result(
                s, artifact_sha256=sha, device_id=device, accelerator="cpu", status=status,
                failure_class=extra.pop("failure_class", None), prefill_tokens=256, decode_tokens=256, runs=3,
                cache_mode="no", runtime="litert-lm", runtime_version="0.18.1", env=extra.pop("env", {}),
                evidence=extra.pop("evidence", []), protocol={}, started_at=T0 + timedelta(days=self.day),
                finished_at=T0 + timedelta(days=self.day), **{**figures, **extra})

    def facts(self) -> dict:
        return model_facts(self.res, "tiny")

    def compose(self, card_cfg: dict | None = None):
        return compose(self.facts(), card_cfg or {}, DEVICES)


def honest(lin: Lineage, arithmetic: bool = True) -> str:
    """The first file, every gate measured and a verified CPU run; then a tokenizer-only change
    whose new file re-ran only the tokenizer gate."""
    a = lin.file("a", "q1")
    for g in ("tokenizer_parity", "logits_parity", "generation_parity", "metadata"):
        lin.gate(a, g)
    lin.gate(a, "state_isolation", "warn", [WARN])
    if arithmetic:
        lin.gate(a, "arithmetic")
    lin.device(a)
    return a



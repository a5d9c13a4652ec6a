"""The benchmark protocol a device runs (its `protocol:` section in infra/devices.yaml): a leaf that
the device registry and every runner read."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Accelerator = Literal["cpu", "gpu", "npu"]
CacheMode = Literal["no", "memory", "disk"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BenchProtocol(_Strict):
    """What one benchmark invocation does. Desktop/Linux CLI: `litert-lm benchmark -p -d --runs
    --cache [--max-num-tokens] [--cpu-thread-count]`; Android binary: `--benchmark
    --benchmark_prefill_tokens --benchmark_decode_tokens --num_iterations`."""

    prefill_tokens: int = Field(256, gt=0)
    decode_tokens: int = Field(256, gt=0)
    runs: int = Field(3, ge=1)
    # "no" recompiles every run (the seeds' house setting); "memory" keeps the compile cache in RAM
    # for the life of the process (the Pi 5 setting: --cache no OOM-kills >= 1.2B files on 8 GB);
    # "disk" writes a cache file next to the bundle (a later run then measures a warm init).
    cache_mode: CacheMode = "no"
    threads: int | None = Field(None, ge=1)
    max_num_tokens: int | None = Field(None, gt=0)
    timeout_s: float = Field(1800, gt=0)
    warmup: bool = True
    # The seeds' Android harness stops a run when free memory falls under 400,000 KiB: a stopped run
    # is classified does_not_fit. None = no guard.
    min_free_kb: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _fits(self) -> "BenchProtocol":
        if self.max_num_tokens is not None and self.prefill_tokens + self.decode_tokens > self.max_num_tokens:
            raise ValueError(
                f"prefill_tokens + decode_tokens ({self.prefill_tokens} + {self.decode_tokens}) exceed "
                f"max_num_tokens ({self.max_num_tokens})"
            )
        return self

    def fit_context(self, context_tokens: int) -> "BenchProtocol":
        """This protocol shrunk to a bundle whose KV cache holds `context_tokens` (the runtime refuses
        a prompt of >= max tokens: "Input token ids are too long ... 32 >= 8"). Unchanged if it fits."""
        if self.prefill_tokens + self.decode_tokens < context_tokens and (
            self.max_num_tokens is None or self.max_num_tokens <= context_tokens
        ):
            return self
        budget = context_tokens - 1
        prefill = max(1, min(self.prefill_tokens, budget * self.prefill_tokens // (self.prefill_tokens + self.decode_tokens)))
        decode = max(1, min(self.decode_tokens, budget - prefill))
        return self.model_copy(update={"prefill_tokens": prefill, "decode_tokens": decode, "max_num_tokens": context_tokens})

"""logits_parity_float and logits_parity: teacher-forced logits of the float export and of the
bundle's TFLite section against the PyTorch reference (one measurement, two targets).

Thresholds: each is a lower bound (`*_min`) or upper bound (`*_max`) on a metric of
farm_toolchain/gates/logits_parity.py; null switches that check off. Defaults: the float export must
be numerically the PyTorch model (measured on the tiny Qwen3.5: top-1 1.0, Pearson 0.99999999, max
|diff| 2e-7); an int8 bundle may move logits (tiny model: top-1 0.958, Pearson 0.99992), so its bounds
are on top-1/top-5 agreement, correlation and KL. `scores_*` apply when the model has a custom op the
plain interpreter cannot run and the runtime's per-token log-likelihoods are compared instead.
"""

from __future__ import annotations

from pydantic import Field

from farm.gates import GateParams, GateRequest, register


class _Logits(GateParams):
    positions: int = Field(48, ge=1, description="teacher-forced positions compared")
    top1_min: float | None = Field(None, ge=0, le=1)
    top5_min: float | None = Field(None, ge=0, le=1)
    pearson_min: float | None = Field(None, ge=-1, le=1)
    kl_max: float | None = Field(None, ge=0)
    kl_ratio_max: float | None = Field(None, ge=0)
    max_abs_diff_max: float | None = Field(None, ge=0)
    scores_pearson_min: float | None = Field(None, ge=-1, le=1)
    scores_max_abs_diff_max: float | None = Field(None, ge=0)
    scores_mean_abs_diff_max: float | None = Field(None, ge=0)

    def thresholds(self) -> dict[str, float | None]:
        return self.model_dump(exclude={"positions"})


class FloatParams(_Logits):
    top1_min: float | None = Field(0.97, ge=0, le=1)
    top5_min: float | None = Field(1.0, ge=0, le=1)
    pearson_min: float | None = Field(0.9999, ge=-1, le=1)
    kl_max: float | None = Field(1e-4, ge=0)
    kl_ratio_max: float | None = Field(1e-3, ge=0)
    max_abs_diff_max: float | None = Field(0.05, ge=0)
    scores_pearson_min: float | None = Field(0.99, ge=-1, le=1)
    scores_max_abs_diff_max: float | None = Field(0.15, ge=0)
    scores_mean_abs_diff_max: float | None = Field(0.02, ge=0)


class BundleParams(_Logits):
    top1_min: float | None = Field(0.8, ge=0, le=1)
    top5_min: float | None = Field(0.95, ge=0, le=1)
    pearson_min: float | None = Field(0.99, ge=-1, le=1)
    kl_max: float | None = Field(0.05, ge=0)
    kl_ratio_max: float | None = Field(0.05, ge=0)
    scores_pearson_min: float | None = Field(0.95, ge=-1, le=1)
    scores_mean_abs_diff_max: float | None = Field(0.1, ge=0)


@register("logits_parity_float", kind="parity", version=2, params=FloatParams, target="float",
          description="teacher-forced logits of the float export vs the PyTorch model")
def float_request(ctx, p: FloatParams) -> GateRequest | None:
    if ctx.float_sha is None:
        return None  # an imported bundle: no float export of ours to compare
    return GateRequest(
        inputs={"model_dir": "reference", "tflite_path": "float_export"},
        args={"label": "float", "positions": p.positions, "prefill_length": ctx.prefill_length,
              "thresholds": p.thresholds()},
    )


@register("logits_parity", kind="parity", version=2, params=BundleParams, sections=("TFLiteModel",),
          description="teacher-forced logits of the bundle's TFLite section vs the PyTorch model")
def bundle_request(ctx, p: BundleParams) -> GateRequest:
    return GateRequest(
        inputs={"model_dir": "reference", "bundle_path": "bundle"},
        args={"label": "quantized", "positions": p.positions, "prefill_length": ctx.prefill_length,
              "thresholds": p.thresholds()},
    )

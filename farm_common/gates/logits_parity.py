"""logits_parity_float and logits_parity: teacher-forced logits of the float export and of the
bundle's TFLite section against the PyTorch reference (one measurement, two targets).

Thresholds: each is a lower bound (`*_min`) or upper bound (`*_max`) on a metric of
farm_toolchain/gates/logits_parity.py; null switches that check off. Defaults: the float export must
be numerically the PyTorch model (measured on the tiny Qwen3.5: top-1 1.0, Pearson 0.99999999, max
|diff| 2e-7); an int8 bundle may move logits (tiny model: top-1 0.958, Pearson 0.99992), so its bounds
are on top-1/top-5 agreement, correlation and KL. `scores_*` apply when the model has a custom op the
plain interpreter cannot run and the runtime's per-token log-likelihoods are compared instead.
The defaults and why: below.
"""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, GateRequest, GateParams


# --- logits_parity_float / logits_parity -------------------------------------------------------------
# Why these numbers: the float export computes the same float32 graph as PyTorch in another order,
# so it should agree almost exactly (measured on the tiny Qwen3.5: top-1 1.0, Pearson 0.99999999,
# max |diff| ~2e-7); one near-tie among 48 positions is tolerated. int8 weights move logits by
# ~1e-2 on the tiny model: random tiny models have flat logits (|logit| < 1) where top-1 is fragile,
# so the quantized gate leans on Pearson and KL; max_abs_diff is scale dependent (real models have
# logits of tens) and is only reported for quantized models. A model that is not the source model
# (negative control: another seed) has Pearson ~0 and fails both.
# Runtime scores (fused exports) are noisier than the Interpreter: on the tiny Qwen3.5 the float
# bundle, whose Interpreter parity is 2e-7, scored mean |Δlogprob| 0.0084, max 0.054 (first target
# token), Pearson 0.998; the int8 bundle 0.0088 / 0.055 / 0.998; the seed-1 bundle (negative
# control) 0.20 / 0.57 / -0.015. The scores_* defaults sit between, with room for trained models.
# A threshold set to null switches that check off.


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


class LogitsParityFloat(_Logits):
    top1_min: float | None = Field(0.97, ge=0, le=1)
    top5_min: float | None = Field(1.0, ge=0, le=1)
    pearson_min: float | None = Field(0.9999, ge=-1, le=1)
    kl_max: float | None = Field(1e-4, ge=0)
    kl_ratio_max: float | None = Field(1e-3, ge=0)
    max_abs_diff_max: float | None = Field(0.05, ge=0)
    scores_pearson_min: float | None = Field(0.99, ge=-1, le=1)
    scores_max_abs_diff_max: float | None = Field(0.15, ge=0)
    scores_mean_abs_diff_max: float | None = Field(0.02, ge=0)


class LogitsParity(_Logits):
    top1_min: float | None = Field(0.8, ge=0, le=1)
    top5_min: float | None = Field(0.95, ge=0, le=1)
    pearson_min: float | None = Field(0.99, ge=-1, le=1)
    kl_max: float | None = Field(0.05, ge=0)
    kl_ratio_max: float | None = Field(0.05, ge=0)
    scores_pearson_min: float | None = Field(0.95, ge=-1, le=1)
    scores_mean_abs_diff_max: float | None = Field(0.1, ge=0)


@GATES.register("logits_parity_float", kind="parity", version=2, params=LogitsParityFloat, target="float", order=10,
                description="teacher-forced logits of the float export vs the PyTorch model")
def float_request(ctx, p: LogitsParityFloat) -> GateRequest | None:
    if ctx.float_sha is None:
        return None  # an imported bundle: no float export of ours to compare
    return GateRequest(inputs={"model_dir": "reference", "tflite_path": "float_export"},
                       args={"label": "float", "prefill_length": ctx.prefill_length, **p.model_dump()})


@GATES.register("logits_parity", kind="parity", version=2, params=LogitsParity, sections=("TFLiteModel",), per_class=True, order=11,
                description="teacher-forced logits of the bundle's TFLite section vs the PyTorch model")
def bundle_request(ctx, p: LogitsParity) -> GateRequest:
    return GateRequest(inputs={"model_dir": "reference", "bundle_path": "bundle"},
                       args={"label": "quantized", "prefill_length": ctx.prefill_length, **p.model_dump()})

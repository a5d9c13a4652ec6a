"""logits_parity_float and logits_parity: teacher-forced logits of the float export and of the
bundle's TFLite section against the PyTorch reference (one measurement, two targets).

Thresholds: each is a lower bound (`*_min`) or upper bound (`*_max`) on a metric of
farm_toolchain/gates/logits_parity.py; null switches that check off. Defaults: the float export must
be numerically the PyTorch model (measured on the tiny Qwen3.5: top-1 1.0, Pearson 0.99999999, max
|diff| 2e-7); an int8 bundle may move logits (tiny model: top-1 0.958, Pearson 0.99992), so its bounds
are on top-1/top-5 agreement, correlation and KL. `scores_*` apply when the model has a custom op the
plain interpreter cannot run and the runtime's per-token log-likelihoods are compared instead.
The defaults and why: farm_common/gate_params.py.
"""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest
from farm_common.gate_params import LogitsParity, LogitsParityFloat


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

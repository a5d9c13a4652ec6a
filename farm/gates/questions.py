"""questions: a question set with answer regexes, asked through the bundle's own chat template, each
reply also checked by the degeneration detector (real models; the questions must be ones the PyTorch
model answers right: faithful conversion includes the model's mistakes)."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest
from farm_common.gate_params import Questions


@GATES.register("questions", kind="quality", version=2, params=Questions, optional=True, per_class=True, order=30,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="a question set with expected-answer regexes, plus the degeneration detector")
def request(ctx, p: Questions) -> GateRequest:
    if ctx.tokenizer_sha is None or ctx.reference_stop_ids is None:
        return GateRequest(inputs={"bundle_path": "bundle"}, args=p.model_dump())
    return GateRequest(inputs={"bundle_path": "bundle", "tokenizer_json": "tokenizer"},
                       args={**p.model_dump(), "reference_stop_ids": ctx.reference_stop_ids})

"""multi_turn: a conversation of several turns on one Engine; each turn's render extends the last."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest
from farm_common.gate_params import MultiTurn


@GATES.register("multi_turn", kind="robustness", version=2, params=MultiTurn, per_class=True, order=80,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="a multi-turn conversation; each turn's render extends the previous one")
def request(ctx, p: MultiTurn) -> GateRequest:
    return GateRequest(inputs={"bundle_path": "bundle", "model_dir": "reference"}, args=p.model_dump())

"""state_isolation: a second conversation on a used Engine vs the same conversation on a fresh one.

A difference fails unless the build config declares it as known runtime behaviour of the family,
with its reason (`gates.state_isolation.known_difference`): then the result is `warn` and its finding
carries the reason, which a model card must print (the seeds' one-Engine-per-conversation warning
came two months late)."""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, GateRequest, GateParams


class StateIsolation(GateParams):
    known_difference: str | None = Field(None, min_length=10, description="why a difference is expected")
    # None: from the bundle's capacity (the measurement: capacity // 16, within [2, 32]).
    max_output_tokens: int | None = Field(None, ge=1)


@GATES.register("state_isolation", kind="robustness", version=2, params=StateIsolation, order=90,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="a second conversation on a used Engine vs on a fresh Engine: pass, warn (declared) or fail")
def request(ctx, p: StateIsolation) -> GateRequest:
    return GateRequest(inputs={"bundle_path": "bundle"}, args=p.model_dump())

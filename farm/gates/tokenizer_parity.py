"""tokenizer_parity: Engine.tokenize of the bundle vs the tokenizers library with the source's
tokenizer.json as recorded at build time (182 multilingual strings: combining marks, NFD, CJK…)."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest
from farm_common.gate_params import TokenizerParity


@GATES.register("tokenizer_parity", kind="tokenizer", version=2, params=TokenizerParity, order=50,
                sections=("HF_Tokenizer_Zlib",),
                description="Engine.tokenize vs the tokenizers library with the source tokenizer.json")
def request(ctx, p: TokenizerParity) -> GateRequest | None:
    if ctx.tokenizer_sha is None:
        return None
    return GateRequest(inputs={"bundle_path": "bundle", "tokenizer_json": "tokenizer"}, args=p.model_dump())

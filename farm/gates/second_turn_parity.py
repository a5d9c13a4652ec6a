"""second_turn_parity: the second reply of a two-turn conversation through litert-lm against
PyTorch's on the sequence the runtime feeds, with the cause named when the runtime's reply is what PyTorch says
with the previous answer's stop token given a zero embedding (the seeds' LiteRT-LM 0.18.1 defect on
bundles that take their prompt as embeddings, issue 21). Image bundles (the ones with an embedder
section); the text build of the same source is its control in tests/integration/test_vision.py."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest, against_reference
from farm_common.gate_params import SecondTurnParity


@GATES.register("second_turn_parity", kind="parity", version=1, params=SecondTurnParity, per_class=True, order=23,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="a second turn's reply vs PyTorch on the whole history (the stop-token embedding check)")
def request(ctx, p: SecondTurnParity) -> GateRequest | None:
    if not ctx.image:
        return None  # a text bundle's decoder looks its tokens up itself: the defect cannot apply
    return against_reference(ctx, p)

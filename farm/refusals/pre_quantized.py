"""Pre-quantized weights (GPTQ / AWQ / bitsandbytes `quantization_config`)."""

from __future__ import annotations

from farm.refusals.base import REFUSALS, SourceFacts


@REFUSALS.register("pre_quantized", order=30)
def refuse(f: SourceFacts) -> tuple[str, str] | None:
    q = f.config.get("quantization_config")
    if not q:
        return None
    method = q.get("quant_method", "?") if isinstance(q, dict) else "?"
    return (f"{f.where} holds pre-quantized weights (quantization_config.quant_method {method!r}): converting "
            "them would quantize already-rounded weights and hide the loss from every gate",
            "use the original full-precision repository (the model card's base_model), or a GGUF source "
            "(dequantized on import, its sha256 recorded)")

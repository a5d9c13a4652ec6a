"""Qwen2 / Qwen2.5 decoders: GQA attention with biased q/k/v projections, ChatML turns. litert-torch
exports them through its generic path; the builder writes `qwen2p5` model-type metadata."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family
from farm.families.tiny import tiny_spec


# Qwen2's pre-tokenizer split (digits one by one), as its released tokenizer.json files carry it:
# transformers 5's Qwen2Tokenizer installs it whatever tokenizer.json says, so a tiny qwen2 whose
# tokenizer.json lacked it would tokenize differently in transformers than in the runtime (measured:
# "1, 2, 3, 4," 8 ids in the runtime, 11 in transformers) - a defect of the tiny model, not the family.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


@FAMILIES.register("qwen2")
class Qwen2(Family):
    architectures = frozenset({"Qwen2ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|im_end|>"
    llm_model_type = "qwen2p5"
    # q/k/v biases; Qwen2's digit split (QWEN2_SPLIT)
    tiny = tiny_spec("Qwen2Config", "Qwen2ForCausalLM", split=QWEN2_SPLIT, tie_word_embeddings=True)

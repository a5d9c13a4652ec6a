"""Cohere Command R7B / Command A decoders (Cohere2): parallel attention and MLP off one LayerNorm,
sliding-window layers with a global one every few, tied embeddings, `<|START_OF_TURN_TOKEN|>` turns;
exported through litert-torch's generic path."""

from farm.families.base import FAMILIES, LLAMA_LAYERS, Family
from farm.families.tiny import tiny_spec, turn_template


COHERE = (("<PAD>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>",
           "<|SYSTEM_TOKEN|>"), "<|END_OF_TURN_TOKEN|>",
          turn_template("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
                        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
                        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"))


@FAMILIES.register("cohere2")
class Cohere2(Family):
    architectures = frozenset({"Cohere2ForCausalLM"})
    layers = LLAMA_LAYERS
    end_of_turn = "<|END_OF_TURN_TOKEN|>"
    tiny = tiny_spec("Cohere2Config", "Cohere2ForCausalLM", COHERE, head_dim=16, sliding_window=16,
                layer_types=["sliding_attention"] * 3 + ["full_attention"], tie_word_embeddings=True)

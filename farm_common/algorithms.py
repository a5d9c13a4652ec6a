"""Facts about ai-edge-quantizer's weight algorithms that both sides act on."""

# Algorithms that rewrite the graph around the weight (a rotation of the op's input, or of an
# EMBEDDING_LOOKUP's output): the stored weight is not the layer's weight, so a sweep measures them
# through the Interpreter on the exact bytes, not by reading the weights back into PyTorch.
ROTATIONS = frozenset({"DECOMPOSED_HADAMARD_ROTATION", "HADAMARD_ROTATION"})
# ai-edge-quantizer 0.10.0 crashes on a rotated EMBEDDING_LOOKUP table quantized blockwise (a TypeError
# in transformations/quantize_tensor.py, measured 2026-12-04); a rotated blockwise FULLY_CONNECTED
# quantizes. Recipes refuse the pair; a sweep calls it not applicable to the embedding.
ROTATED_BLOCKWISE_TABLE = ("a Hadamard-rotated EMBEDDING_LOOKUP table must be channelwise: ai-edge-quantizer 0.10.0 "
                           "crashes quantizing it blockwise (TypeError in quantize_tensor.py)")

# ai-edge-quantizer's dequantized-weight recovery: it reads each block's scale off weights that
# already sit on a symmetric integer grid (a source-grid export's `grid_sym` layers) and fails on
# any other weight, so a sweep applies it only to groups the export split.
RECOVERY = "dequantized_weight_recovery"

# A source-grid export (farm_toolchain/grid.py) splits each linear layer on an affine 4-bit block
# grid into two children whose ops' scopes end with these names: the symmetric int4 part and the
# per-block offsets. Recipes match them with these regexes.
GRID_SYM, GRID_OFFSET = "grid_sym", "grid_offset"
GRID_SYM_REGEX, GRID_OFFSET_REGEX = f"Linear_{GRID_SYM};", f"Linear_{GRID_OFFSET};"

"""Facts about ai-edge-quantizer's weight algorithms that both sides act on."""

# Algorithms that rewrite the graph around the weight (a rotation of the op's input, or of an
# EMBEDDING_LOOKUP's output): the stored weight is not the layer's weight, so a sweep measures them
# through the Interpreter on the exact bytes, not by reading the weights back into PyTorch.
ROTATIONS = frozenset({"DECOMPOSED_HADAMARD_ROTATION", "HADAMARD_ROTATION"})

"""Reading a .tflite flatbuffer in place (no weights copied): the one signature reader."""

from __future__ import annotations

from typing import Any


def signatures_at(buf: Any, offset: int = 0) -> dict[str, dict[str, dict[str, list[int]]]]:
    """{signature key: {"inputs": {name: shape}, "outputs": {name: shape}}} of the model whose root
    is at `offset` of `buf` (bytes or an mmap). Flatbuffer offsets are relative, so a model inside a
    .litertlm section is read where it lies."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(buf, offset)

    def shape(sg: Any, index: int) -> list[int]:
        t = sg.Tensors(index)
        return [int(x) for x in t.ShapeAsNumpy()] if t.ShapeLength() else []

    out: dict[str, dict[str, dict[str, list[int]]]] = {}
    for i in range(model.SignatureDefsLength()):
        sig = model.SignatureDefs(i)
        sg = model.Subgraphs(sig.SubgraphIndex())
        out[sig.SignatureKey().decode()] = {
            "inputs": {sig.Inputs(j).Name().decode(): shape(sg, sig.Inputs(j).TensorIndex()) for j in range(sig.InputsLength())},
            "outputs": {sig.Outputs(j).Name().decode(): shape(sg, sig.Outputs(j).TensorIndex()) for j in range(sig.OutputsLength())},
        }
    return out

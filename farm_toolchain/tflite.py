"""Reading a .tflite flatbuffer in place (no weights copied): the one signature reader, and the
one weight reader (which ops carry weights, their tensors, types and buffers) that the quantize
read-back and the sensitivity measurement share."""

from __future__ import annotations

from types import SimpleNamespace
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


# --- weights: what a weight op reads, float or quantized ------------------------------------------

# Op types whose constant operand is a weight matrix/kernel the quantizer may quantize.
WEIGHT_OPS = frozenset(
    {
        "FULLY_CONNECTED",
        "EMBEDDING_LOOKUP",
        "BATCH_MATMUL",
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "CONV_3D",
        "TRANSPOSE_CONV",
        "CONV_3D_TRANSPOSE",
    }
)


def flatbuffer_schema():
    from ai_edge_litert import schema_py_generated

    return schema_py_generated


def enum_names(cls) -> dict[int, str]:
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


class Model:
    """Lazy view of a .tflite (the generated accessors read in place: no copy of the weights)."""

    def __init__(self, buf: bytes | bytearray):
        schema = flatbuffer_schema()
        self.schema = schema
        self.buf = buf
        self.model = schema.Model.GetRootAs(buf, 0)
        op_names = enum_names(schema.BuiltinOperator)
        self.type_names = enum_names(schema.TensorType)
        self.opcodes: list[str] = []
        for i in range(self.model.OperatorCodesLength()):
            oc = self.model.OperatorCodes(i)
            code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
            name = op_names.get(code, str(code))
            if name == "CUSTOM" and oc.CustomCode():
                name = f"CUSTOM:{oc.CustomCode().decode()}"
            self.opcodes.append(name)
        self._has_data: dict[int, bool] = {}

    def buffer_has_data(self, index: int) -> bool:
        if index <= 0:
            return False
        if index not in self._has_data:
            b = self.model.Buffers(index)
            self._has_data[index] = b is not None and (b.DataLength() > 0 or b.Offset() > 1)
        return self._has_data[index]

    def buffer_bytes(self, index: int) -> int:
        """Stored size of a constant buffer: inline data, or the external (offset, size) pair."""
        if not self.buffer_has_data(index):
            return 0
        b = self.model.Buffers(index)
        return b.DataLength() if b.DataLength() > 0 else int(b.Size())

    def weight_bytes(self) -> int:
        """Bytes of every distinct constant buffer: the model's weights, without graph overhead."""
        seen: set[int] = set()
        for sg in self.subgraphs():
            for ti in range(sg.TensorsLength()):
                seen.add(sg.Tensors(ti).Buffer())
        return sum(self.buffer_bytes(i) for i in seen)

    def subgraphs(self):
        for i in range(self.model.SubgraphsLength()):
            yield self.model.Subgraphs(i)


def tensor_info(model: Model, sg, index: int) -> dict[str, Any]:
    t = sg.Tensors(index)
    q = t.Quantization()
    block = 0
    if q is not None and q.DetailsType() == model.schema.QuantizationDetails.BlockwiseQuantization:
        details = model.schema.BlockwiseQuantization()
        table = q.Details()
        details.Init(table.Bytes, table.Pos)
        block = int(details.BlockSize())
    return {
        "index": index,
        "name": t.Name() or b"",
        "type": model.type_names.get(t.Type(), str(t.Type())),
        "rank": t.ShapeLength(),
        "shape": [int(x) for x in t.ShapeAsNumpy()] if t.ShapeLength() else [],
        "buffer": t.Buffer(),
        "constant": model.buffer_has_data(t.Buffer()),
        "scaled": q is not None and (q.ScaleLength() > 0 or block > 0),
        "block_size": block,
    }


FLOAT_TYPES = {"FLOAT32", "FLOAT16", "BFLOAT16"}
QINT_TYPES = {"INT8", "UINT8", "INT16", "INT4", "INT2", "UINT4"}
BITS = {"INT2": 2, "INT4": 4, "UINT4": 4, "INT8": 8, "UINT8": 8, "INT16": 16}


def is_weight(info: dict[str, Any]) -> bool:
    if not info["constant"] or info["rank"] < 2:
        return False
    return info["type"] in FLOAT_TYPES or (info["type"] in QINT_TYPES and info["scaled"])


def is_rotation(model: Model, info: dict[str, Any]) -> bool:
    """A float32 [n, n] constant, n a power of two, every entry ±1/sqrt(n): the normalized Hadamard
    matrix ai-edge-quantizer's decomposed Hadamard rotation inserts (as the weight of a new
    FULLY_CONNECTED) in front of a rotated weight's op or after a rotated EMBEDDING_LOOKUP. It is
    part of the rotation, not a weight of the model: the read-backs leave its op out."""
    import numpy as np

    shape = info["shape"]
    if info["type"] != "FLOAT32" or not info["constant"] or len(shape) != 2 or shape[0] != shape[1]:
        return False
    n = shape[0]
    if n < 2 or n & (n - 1):
        return False
    raw = buffer_data(model, info["buffer"])
    if raw.size != n * n * 4:
        return False
    return is_hadamard(np.frombuffer(raw.tobytes(), dtype=np.float32).reshape(n, n))


def is_hadamard(m: Any) -> bool:
    """m is a normalized Hadamard matrix: square, a power of two, entries ±1/sqrt(n), orthogonal."""
    import numpy as np

    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] < 2 or m.shape[0] & (m.shape[0] - 1):
        return False
    n = m.shape[0]
    if not np.allclose(np.abs(m), 1 / np.sqrt(n), rtol=1e-5, atol=0):
        return False
    return bool(np.allclose(m.astype(np.float64) @ m.T.astype(np.float64), np.eye(n), atol=1e-4))


def rotation_op(model: Model, op_type: str, weights: list[dict[str, Any]]) -> bool:
    return op_type == "FULLY_CONNECTED" and len(weights) == 1 and is_rotation(model, weights[0])


def count_rotation_ops(model: Model) -> int:
    """How many FULLY_CONNECTED ops of the model are inserted Hadamard rotations."""
    n = 0
    for sg in model.subgraphs():
        for oi in range(sg.OperatorsLength()):
            op = sg.Operators(oi)
            if model.opcodes[op.OpcodeIndex()] != "FULLY_CONNECTED" or not op.InputsLength():
                continue
            weights = [w for w in (tensor_info(model, sg, int(i)) for i in op.InputsAsNumpy() if i != -1) if is_weight(w)]
            n += int(rotation_op(model, "FULLY_CONNECTED", weights))
    return n


class LazyTensorNames:
    """Stands in for `subgraph.tensors` in get_op_scope: only `.name` of indexed tensors is read."""

    def __init__(self, sg):
        self._sg = sg
        self._cache: dict[int, SimpleNamespace] = {}

    def __getitem__(self, index: int) -> SimpleNamespace:
        if index not in self._cache:
            self._cache[index] = SimpleNamespace(name=self._sg.Tensors(index).Name() or b"")
        return self._cache[index]


def dequantize_map(model: Model, sg: Any) -> dict[int, int]:
    """{DEQUANTIZE output tensor: its input}: a weight-only op reads its weight through one."""
    out: dict[int, int] = {}
    for oi in range(sg.OperatorsLength()):
        op = sg.Operators(oi)
        if model.opcodes[op.OpcodeIndex()] == "DEQUANTIZE" and op.InputsLength() and op.OutputsLength():
            out[int(op.Outputs(0))] = int(op.Inputs(0))
    return out


def weight_ops(model: Model) -> list[dict[str, Any]]:
    """Every op of a weight-bearing type that reads at least one weight tensor, in graph order:
    {"subgraph", "op", "type", "scope" (the quantizer's own get_op_scope), "key" (subgraph index
    and output tensor names: what identifies the op in the float export and in any quantized model
    made from it, whose op indices shift when DEQUANTIZE ops are inserted), "weights": [tensor_info
    of each weight, read through a DEQUANTIZE op when one feeds it]}."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils

    out = []
    for si, sg in enumerate(model.subgraphs()):
        names = LazyTensorNames(sg)
        dequantized = dequantize_map(model, sg)
        for oi in range(sg.OperatorsLength()):
            op = sg.Operators(oi)
            op_type = model.opcodes[op.OpcodeIndex()]
            if op_type not in WEIGHT_OPS:
                continue
            inputs = [int(x) for x in op.InputsAsNumpy()] if op.InputsLength() else []
            outputs = [int(x) for x in op.OutputsAsNumpy()] if op.OutputsLength() else []
            weights = [w for w in (tensor_info(model, sg, dequantized.get(i, i)) for i in inputs if i != -1)
                       if is_weight(w)]
            if not weights or rotation_op(model, op_type, weights):
                continue
            scope = tfl_flatbuffer_utils.get_op_scope(SimpleNamespace(inputs=inputs, outputs=outputs), names,
                                                      max_length=10000)
            key = (si, tuple(bytes(names[o].name) for o in outputs if o != -1))
            out.append({"subgraph": si, "op": oi, "type": op_type, "scope": scope, "key": key, "weights": weights,
                        "sg": sg})
    return out


def buffer_data(model: Model, index: int) -> Any:
    """A constant buffer's bytes as a uint8 numpy view (inline, or at its external offset)."""
    import numpy as np

    b = model.model.Buffers(index)
    if b.DataLength() > 0:
        return b.DataAsNumpy()
    return np.frombuffer(model.buf, dtype=np.uint8, count=int(b.Size()), offset=int(b.Offset()))


def _unpack(raw: Any, bits: int, count: int) -> Any:
    """Signed integers packed `8 // bits` to a byte, the first value in the low bits (the
    quantizer's transformation_utils.pack_data), sign-extended."""
    import numpy as np

    per = 8 // bits
    mask = (1 << bits) - 1
    vals = np.empty(raw.size * per, dtype=np.int8)
    for k in range(per):
        vals[k::per] = ((raw >> (k * bits)) & mask).astype(np.int8)
    vals = vals[:count]
    sign = 1 << (bits - 1)
    return np.where(vals >= sign, vals - (1 << bits), vals).astype(np.int8)


def dequantized(model: Model, sg: Any, info: dict[str, Any]) -> Any:
    """The float32 values a weight tensor stands for, read from the file: float tensors as stored
    (FLOAT16 widened), integer tensors times their per-channel scales (minus zero points) or their
    blockwise scales (an FP16 tensor named in BlockwiseQuantization details, blocks along the last
    axis). What the kernels compute with, up to their own arithmetic."""
    import numpy as np

    shape = info["shape"]
    count = int(np.prod(shape))
    raw = buffer_data(model, info["buffer"])
    kind = info["type"]
    if kind == "FLOAT32":
        return np.frombuffer(raw.tobytes(), dtype=np.float32, count=count).reshape(shape)
    if kind == "FLOAT16":
        return np.frombuffer(raw.tobytes(), dtype=np.float16, count=count).astype(np.float32).reshape(shape)
    if kind not in BITS:
        raise ValueError(f"cannot dequantize a {kind} weight")
    bits = BITS[kind]
    if bits in (2, 4):
        q = _unpack(np.asarray(raw, dtype=np.uint8), bits, count)
    else:
        dtype = {"INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16}[kind]
        q = np.frombuffer(raw.tobytes(), dtype=dtype, count=count)
    q = q.astype(np.float32).reshape(shape)
    t = sg.Tensors(info["index"])
    qp = t.Quantization()
    if info["block_size"]:
        details = model.schema.BlockwiseQuantization()
        table = qp.Details()
        details.Init(table.Bytes, table.Pos)
        s_info = tensor_info(model, sg, int(details.Scales()))
        s_info["index"] = int(details.Scales())
        scales = dequantized(model, sg, s_info)  # [rows, cols // block]
        block = info["block_size"]
        return (q.reshape(shape[0], -1, block) * scales.reshape(shape[0], -1, 1)).reshape(shape)
    scale = qp.ScaleAsNumpy().astype(np.float32)
    zero = qp.ZeroPointAsNumpy().astype(np.float32) if qp.ZeroPointLength() else np.zeros_like(scale)
    axis = int(qp.QuantizedDimension())
    bshape = [1] * len(shape)
    bshape[axis] = -1
    return (q - zero.reshape(bshape)) * scale.reshape(bshape)


def float_elements(model: Model) -> int:
    """Elements of the constant float tensors, each buffer counted once (prefill and decode share
    their weight buffers; a tied embedding/lm_head is one buffer): the model's parameters. The
    per-block offsets of a source-grid export (farm_toolchain/grid.py) are not counted: they
    re-express the source's own weights, so bytes per parameter stay per the source's parameter."""
    from farm_toolchain.grid import OFFSET_NAME

    sizes: dict[int, int] = {}
    for sg in model.subgraphs():
        for ti in range(sg.TensorsLength()):
            t = sg.Tensors(ti)
            if model.type_names.get(t.Type()) not in FLOAT_TYPES or not model.buffer_has_data(t.Buffer()):
                continue
            if OFFSET_NAME in (t.Name() or b"").decode("utf-8", "replace"):
                continue
            n = 1
            for d in t.ShapeAsNumpy() if t.ShapeLength() else []:
                n *= int(d)
            sizes[t.Buffer()] = max(sizes.get(t.Buffer(), 0), n)
    return sum(sizes.values())

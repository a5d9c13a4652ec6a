"""quantize: apply a rendered ai-edge-quantizer recipe, then read the result back and say what it did.

Request:
    {"input_path": float .tflite, "output_path": where to write the quantized .tflite,
     "recipe": [{regex, operation, algorithm_key, op_config}, ...]   (farm.recipes.Recipe.render()),
     "exceptions": [{"name", "regex"}, ...]                            (the recipe's float exceptions)}
Result:
    {"output_path", "exceptions": [{"name", "regex", "matched_ops", "float32_ops", "matched_scopes",
     "op_types"}], "quantized_ops": {op type: n}, "float_ops": {op type: n}, "params", "input_bytes",
     "output_bytes", "seconds"}

The quantizer matches entries with `re.search(regex, scope)`, an op's scope being its output tensor
names joined by ';' plus a trailing ';' (input names when it has no outputs), cut at 10000 chars:
ai_edge_quantizer/utils/tfl_flatbuffer_utils.py `get_op_scope`, which this module calls itself so
the report matches by exactly the quantizer's rule. Nothing is inferred from the recipe: the counts
come from the quantized flatbuffer as written.

Terms in the report:
- weight tensor: a constant input (it has buffer data) of rank >= 2 with a float type
  (FLOAT32/FLOAT16/BFLOAT16) or a quantized integer type (INT8/UINT8/INT16/INT4/INT2/UINT4 with
  quantization scales). Shapes/indices (INT32/INT64), biases and norm vectors (rank 1) are not.
- weight op: an op of a weight-bearing type (_WEIGHT_OPS) with at least one weight tensor.
- quantized_ops: weight ops with an integer-quantized weight tensor, by op type (all subgraphs).
- float_ops: weight ops whose weight tensors are all float, by op type.
- exceptions[].matched_ops: weight ops whose scope the exception's regex matches (the ops the
  exception can keep float); matched_scopes counts every matching op, weight-bearing or not;
  float32_ops: how many of matched_ops have all weight tensors FLOAT32 after quantization.
- params: elements of the input model's constant float tensors, each buffer counted once (prefill and
  decode share their weight buffers; a tied embedding/lm_head is one buffer; constants the converter
  deduplicated, e.g. a randomly initialised model's identical norm vectors, count once).
"""

from __future__ import annotations

import mmap
import os
import re
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from farm_toolchain import protocol

# Op types whose constant operand is a weight matrix/kernel the quantizer may quantize.
_WEIGHT_OPS = frozenset(
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
_MAX_SCOPE = 10000  # get_op_scope's default max_length


def handle(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    src, dst, recipe, exceptions = _parse_request(request)

    from ai_edge_quantizer import quantizer as quantizer_lib  # heavy import: after validation

    protocol.progress(f"quantizing {src.name} ({src.stat().st_size / 1e6:.1f} MB), {len(recipe)} recipe entries")
    qt = quantizer_lib.Quantizer(str(src))
    try:
        qt.load_quantization_recipe(recipe)
    except KeyError as exc:
        raise protocol.BadInput(f"ai_edge_quantizer rejected the recipe: an entry lacks {exc}") from None
    except (ValueError, TypeError) as exc:
        raise protocol.BadInput(f"ai_edge_quantizer rejected the recipe: {_one_line(exc)}") from None
    # The quantizer keys entries by regex and merges some; if it does not re-emit the recipe
    # unchanged, "last match wins" no longer reads off the recipe as written.
    reemitted = qt.get_quantization_recipe()
    if reemitted != recipe:
        first = next((i for i, (a, b) in enumerate(zip(recipe, reemitted)) if a != b), min(len(recipe), len(reemitted)))
        raise protocol.BadInput(
            f"ai_edge_quantizer re-emits the recipe differently from entry {first} on (it merges entries "
            f"that share a regex and fills op_config defaults): render entries the way it writes them"
        )
    result = qt.quantize(enable_progress_report=False)
    quantized = result.quantized_model
    if not quantized:
        raise RuntimeError("ai_edge_quantizer produced no model")
    _write_atomically(dst, quantized)
    protocol.progress(f"wrote {dst} ({len(quantized) / 1e6:.1f} MB); reading it back")

    report = _inspect(quantized, exceptions)
    params = _count_params(src)
    weight_bytes = _Model(quantized).weight_bytes()
    return {
        "output_path": str(dst),
        "exceptions": report["exceptions"],
        "quantized_ops": report["quantized_ops"],
        "float_ops": report["float_ops"],
        "params": params,
        "weight_bytes": weight_bytes,
        "input_bytes": src.stat().st_size,
        "output_bytes": dst.stat().st_size,
        "seconds": round(time.monotonic() - started, 3),
    }


# --- request -------------------------------------------------------------------------------------


def _parse_request(request: dict[str, Any]) -> tuple[Path, Path, list[dict], list[dict]]:
    for key in ("input_path", "output_path", "recipe"):
        if key not in request:
            raise protocol.BadInput(f"quantize request is missing {key!r}")
    src = Path(request["input_path"])
    if not src.is_file():
        raise protocol.BadInput(f"input_path {str(src)!r} is not a file: pass the float .tflite to quantize")
    with src.open("rb") as f:
        head = f.read(8)
    if head[4:8] != b"TFL3":
        raise protocol.BadInput(f"input_path {str(src)!r} is not a TFLite flatbuffer (no TFL3 identifier)")
    dst = Path(request["output_path"])
    if dst.resolve() == src.resolve():
        raise protocol.BadInput("output_path must differ from input_path")
    if not dst.parent.is_dir():
        raise protocol.BadInput(f"output_path's folder {str(dst.parent)!r} does not exist")

    recipe = request["recipe"]
    if not isinstance(recipe, list) or not recipe:
        raise protocol.BadInput("recipe must be a non-empty list of {regex, operation, algorithm_key, op_config}")
    for i, entry in enumerate(recipe):
        if not isinstance(entry, dict) or not {"regex", "operation", "algorithm_key"} <= entry.keys():
            raise protocol.BadInput(f"recipe entry {i} needs regex, operation and algorithm_key")
        _compile(entry["regex"], f"recipe entry {i}")

    exceptions = request.get("exceptions") or []
    if not isinstance(exceptions, list):
        raise protocol.BadInput("exceptions must be a list of {name, regex}")
    for i, exc in enumerate(exceptions):
        if not isinstance(exc, dict) or not isinstance(exc.get("name"), str) or not isinstance(exc.get("regex"), str):
            raise protocol.BadInput(f"exception {i} needs a name and a regex (strings)")
        _compile(exc["regex"], f"exception {exc['name']!r}")
    return src, dst, recipe, exceptions


def _compile(regex: Any, where: str) -> re.Pattern:
    if not isinstance(regex, str):
        raise protocol.BadInput(f"{where}: regex must be a string")
    try:
        return re.compile(regex)
    except re.error as exc:
        raise protocol.BadInput(f"{where}: regex {regex!r} does not compile: {exc}") from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _write_atomically(dst: Path, data: bytes | bytearray) -> None:
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()


# --- reading a .tflite back ----------------------------------------------------------------------


def _schema():
    from ai_edge_litert import schema_py_generated as schema

    return schema


def _enum_names(cls) -> dict[int, str]:
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


class _Model:
    """Lazy view of a .tflite (the generated accessors read in place: no copy of the weights)."""

    def __init__(self, buf: bytes | bytearray):
        schema = _schema()
        self.schema = schema
        self.buf = buf
        self.model = schema.Model.GetRootAs(buf, 0)
        op_names = _enum_names(schema.BuiltinOperator)
        self.type_names = _enum_names(schema.TensorType)
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


def _tensor_info(model: _Model, sg, index: int) -> dict[str, Any]:
    t = sg.Tensors(index)
    q = t.Quantization()
    return {
        "name": t.Name() or b"",
        "type": model.type_names.get(t.Type(), str(t.Type())),
        "rank": t.ShapeLength(),
        "shape": [int(x) for x in t.ShapeAsNumpy()] if t.ShapeLength() else [],
        "buffer": t.Buffer(),
        "constant": model.buffer_has_data(t.Buffer()),
        "scaled": q is not None and q.ScaleLength() > 0,
    }


_FLOAT_TYPES = {"FLOAT32", "FLOAT16", "BFLOAT16"}
_QINT_TYPES = {"INT8", "UINT8", "INT16", "INT4", "INT2", "UINT4"}


def _is_weight(info: dict[str, Any]) -> bool:
    if not info["constant"] or info["rank"] < 2:
        return False
    return info["type"] in _FLOAT_TYPES or (info["type"] in _QINT_TYPES and info["scaled"])


def _inspect(buf: bytes | bytearray, exceptions: list[dict]) -> dict[str, Any]:
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils

    model = _Model(buf)
    patterns = [(e, re.compile(e["regex"])) for e in exceptions]
    per_exc = [{"matched_ops": 0, "float32_ops": 0, "matched_scopes": 0, "op_types": set()} for _ in exceptions]
    quantized_ops: Counter[str] = Counter()
    float_ops: Counter[str] = Counter()

    for sg in model.subgraphs():
        names = _LazyTensorNames(sg)
        for oi in range(sg.OperatorsLength()):
            op = sg.Operators(oi)
            op_type = model.opcodes[op.OpcodeIndex()]
            inputs = [int(x) for x in op.InputsAsNumpy()] if op.InputsLength() else []
            outputs = [int(x) for x in op.OutputsAsNumpy()] if op.OutputsLength() else []
            weights = []
            if op_type in _WEIGHT_OPS:
                weights = [w for w in (_tensor_info(model, sg, i) for i in inputs if i != -1) if _is_weight(w)]
            is_quantized = any(w["type"] in _QINT_TYPES for w in weights)
            all_f32 = bool(weights) and all(w["type"] == "FLOAT32" for w in weights)
            if weights:
                (quantized_ops if is_quantized else float_ops)[op_type] += 1
            if not patterns:
                continue
            # The quantizer's own scope function, fed the two fields it reads.
            scope = tfl_flatbuffer_utils.get_op_scope(
                SimpleNamespace(inputs=inputs, outputs=outputs), names, max_length=_MAX_SCOPE
            )
            for k, (_, rx) in enumerate(patterns):
                if rx.search(scope):
                    per_exc[k]["matched_scopes"] += 1
                    if weights:
                        per_exc[k]["matched_ops"] += 1
                        per_exc[k]["float32_ops"] += int(all_f32)
                        per_exc[k]["op_types"].add(op_type)

    return {
        "exceptions": [
            {"name": e["name"], "regex": e["regex"], **r, "op_types": sorted(r["op_types"])}
            for e, r in zip(exceptions, per_exc)
        ],
        "quantized_ops": dict(sorted(quantized_ops.items())),
        "float_ops": dict(sorted(float_ops.items())),
    }


class _LazyTensorNames:
    """Stands in for `subgraph.tensors` in get_op_scope: only `.name` of indexed tensors is read."""

    def __init__(self, sg):
        self._sg = sg
        self._cache: dict[int, SimpleNamespace] = {}

    def __getitem__(self, index: int) -> SimpleNamespace:
        if index not in self._cache:
            self._cache[index] = SimpleNamespace(name=self._sg.Tensors(index).Name() or b"")
        return self._cache[index]


def _count_params(path: Path) -> int:
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return _count_float_elements(_Model(buf))


def _count_float_elements(model: _Model) -> int:
    sizes: dict[int, int] = {}
    for sg in model.subgraphs():
        for ti in range(sg.TensorsLength()):
            t = sg.Tensors(ti)
            if model.type_names.get(t.Type()) not in _FLOAT_TYPES or not model.buffer_has_data(t.Buffer()):
                continue
            n = 1
            for d in t.ShapeAsNumpy() if t.ShapeLength() else []:
                n *= int(d)
            sizes[t.Buffer()] = max(sizes.get(t.Buffer(), 0), n)
    return sum(sizes.values())

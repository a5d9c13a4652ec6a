"""quantize: apply a rendered ai-edge-quantizer recipe, then read the result back and say what each
rule did. check_recipe: whether the installed quantizer accepts a recipe, before any work.

quantize request:
    {"input_path": float .tflite, "output_path": where to write the quantized .tflite,
     "recipe": [{regex, operation, algorithm_key, op_config}, ...]   (farm.recipes.Recipe.render()),
     "rules": [{"name", "regex", "operation", "algorithm_key", "op_config", "expected_bits"}, ...]
              (Recipe.toolchain_rules(): the same entries, named, with the bits the read-back must find),
     "calibration": {"text_path", "tokenizer_path", "samples", "max_tokens"}   (static recipes only)}
Result:
    {"output_path", "rules": [{"name", "regex", "operation", "matched_scopes", "matched_ops",
     "as_expected", "read_back": {tensor type: n}, "block_sizes": [...], "activation_types": {...},
     "op_types"}], "quantized_ops": {op type: n}, "float_ops": {op type: n}, "rotation_ops", "params",
     "weight_bytes", "input_bytes", "output_bytes", "calibration_samples", "seconds"}

check_recipe request: {"recipe": [...]}. Result: {"accepted": bool, "errors": ["entry 0 (FULLY_CONNECTED, …): ..."]}:
each entry loaded by the quantizer's own RecipeManager (its algorithm must be an AlgorithmName of
this install; a config for a named op must pass the algorithm's policy check; a `*` entry must suit
at least one weight op type, as the quantizer applies it to every op it suits and skips the rest).

The quantizer matches entries with `re.search(regex, scope)`, an op's scope being its output tensor
names joined by ';' plus a trailing ';' (input names when it has no outputs), cut at 10000 chars:
ai_edge_quantizer/utils/tfl_flatbuffer_utils.py `get_op_scope`, which this module calls itself so
the report matches by exactly the quantizer's rule. Which entry an op gets is the quantizer's rule
too: the last matching entry whose config the algorithm accepts for that op type
(recipe_manager.py `get_quantization_configs`, re-implemented with its own check function).
Nothing is inferred from the recipe: types and bit widths come from the quantized flatbuffer.

Terms in the report:
- weight tensor: a constant input of rank >= 2 with a float type (FLOAT32/FLOAT16/BFLOAT16) or a
  quantized integer type (INT8/UINT8/INT16/INT4/INT2/UINT4) with quantization scales or blockwise
  details (an int4 blockwise-32 weight has no per-channel scales: its scales are a tensor named in
  BlockwiseQuantization details). A weight-only rule feeds the op a float tensor made by a
  DEQUANTIZE op: the weight is that DEQUANTIZE's constant input. Shapes/indices, biases and norm
  vectors (rank 1) are not weights.
- weight op: an op of a weight-bearing type (tflite.WEIGHT_OPS) with at least one weight tensor.
- quantized_ops / float_ops: weight ops with an integer-quantized / all-float weight, by op type.
- rotation_ops: FULLY_CONNECTED ops the quantizer inserted for a Hadamard rotation (their weight is
  a normalized Hadamard matrix, tflite.is_rotation): not weights of the model, in no rule and in
  neither count.
- rules[].matched_scopes: ops of the rule's type whose scope the regex matches (weights or not);
  matched_ops: weight ops this rule is the last applicable entry for (what it governs);
  as_expected: how many of those read back as the rule says (every weight at expected_bits, or
  all FLOAT32 for a float rule); read_back: their weight tensor types.
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

from farm_toolchain import protocol, tflite
from farm_toolchain.commands import COMMANDS

_MAX_SCOPE = 10000  # get_op_scope's default max_length


@COMMANDS.register("quantize")
def handle(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    src, dst, recipe, rules = _parse_request(request)

    from ai_edge_quantizer import (
        quantizer as quantizer_lib,  # heavy import: after validation
    )

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
    calibration = request.get("calibration")
    samples = 0
    if qt.need_calibration:
        if not calibration:
            raise protocol.BadInput("the recipe has static (calibrated) entries but the request names no calibration set")
        data = _calibration_data(src, calibration)
        samples = sum(len(v) for v in data.values())
        protocol.progress(f"calibrating on {samples} samples")
        result = qt.quantize(qt.calibrate(data), enable_progress_report=False)
    else:
        result = qt.quantize(enable_progress_report=False)
    quantized = result.quantized_model
    if not quantized:
        raise RuntimeError("ai_edge_quantizer produced no model")
    _write_atomically(dst, quantized)
    protocol.progress(f"wrote {dst} ({len(quantized) / 1e6:.1f} MB); reading it back")

    report = inspect_rules(quantized, rules)
    params = _count_params(src)
    weight_bytes = tflite.Model(quantized).weight_bytes()
    return {
        "output_path": str(dst),
        "rules": report["rules"],
        "calibration_samples": samples,
        "quantized_ops": report["quantized_ops"],
        "float_ops": report["float_ops"],
        "rotation_ops": report["rotation_ops"],
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

    rules = request.get("rules") or []
    if not isinstance(rules, list):
        raise protocol.BadInput("rules must be a list of {name, regex, operation, algorithm_key, op_config, expected_bits}")
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or not isinstance(rule.get("name"), str) or not isinstance(rule.get("regex"), str):
            raise protocol.BadInput(f"rule {i} needs a name and a regex (strings)")
        _compile(rule["regex"], f"rule {rule['name']!r}")
    return src, dst, recipe, rules


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


# --- check_recipe --------------------------------------------------------------------------------


@COMMANDS.register("check_recipe")
def check_recipe(request: dict[str, Any]) -> dict[str, Any]:
    recipe = request.get("recipe")
    if not isinstance(recipe, list) or not recipe:
        raise protocol.BadInput("check_recipe needs recipe: a non-empty list of entries")
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe_manager

    errors = []
    for i, entry in enumerate(recipe):
        op, algo = entry.get("operation"), entry.get("algorithm_key")
        where = f"entry {i} ({op}, {algo})"
        try:
            algorithm_manager.AlgorithmName(algo)
        except ValueError:
            known = ", ".join(a.value for a in algorithm_manager.AlgorithmName)
            errors.append(f"{where}: unknown algorithm {algo!r}; this quantizer has {known}")
            continue
        if algo == "no_quantize":
            continue
        try:
            config = qtyping.OpQuantizationConfig.from_dict(entry.get("op_config") or {})
        except (TypeError, ValueError, KeyError) as exc:
            errors.append(f"{where}: op_config not accepted: {_one_line(exc)}")
            continue
        ops = sorted(tflite.WEIGHT_OPS) if op == "*" else [op]
        refusals = []
        for name in ops:
            try:
                if name not in {o.value for o in qtyping.TFLOperationName}:
                    raise ValueError(f"{name} is not an op this quantizer knows")
                algorithm_manager.check_op_quantization_config(algo, name, config)
            except (ValueError, KeyError) as exc:
                refusals.append(f"{name}: {_one_line(exc)}")
        if len(refusals) == len(ops):
            errors.append(f"{where}: the quantizer refuses this config: {refusals[0][:400]}")
    # And the whole list as the quantizer loads it (its own ordering and merging rules).
    if not errors:
        try:
            manager = recipe_manager.RecipeManager()
            manager.load_quantization_recipe(recipe)
            if manager.get_quantization_recipe() != recipe:
                errors.append("the quantizer re-emits the recipe differently (it merges entries that share a regex)")
        except (ValueError, TypeError, KeyError) as exc:
            errors.append(f"the quantizer refuses the recipe: {_one_line(exc)}")
    return {"accepted": not errors, "errors": errors}  # not "ok": the protocol's own success flag


def _calibration_data(model_path: Path, calibration: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Calibration samples for a static recipe, as `steps` says: "runtime" (the float model driven
    as litert-lm drives it, `_runtime_samples`) or "fresh" (below)."""
    if calibration.get("steps") == "runtime":
        return _runtime_samples(model_path, calibration)
    return _fresh_samples(model_path, calibration)


# Decode calls kept per calibration line (every k-th, spread over the line): each decode sample holds
# the whole KV cache (SmolLM2-135M at cache 256: ~12 MB), so their number bounds the memory.
RUNTIME_DECODE_SAMPLES = 96


def _runtime_samples(model_path: Path, calibration: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The calibration lines (joined, cut into prompts of max_tokens) run through the float model the
    way the runtime runs a prompt: full chunks of the smallest prefill signature, the rest of the line one decode step at a time, then
    `generate` greedy tokens (decode feeding its own argmax back), every state output fed to the
    next call, so the decode steps see a KV cache filled as at run time (not the empty cache and
    position 0 of "fresh"). The prefill calls and up to RUNTIME_DECODE_SAMPLES decode calls (spread
    evenly over all of them) are the samples, with the exact inputs they were run with."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    from tokenizers import Tokenizer

    from farm_toolchain.tflite_run import mask as _mask

    text = Path(calibration["text_path"]).read_text(encoding="utf-8")
    lines = [x for x in text.splitlines() if x.strip()][: int(calibration["samples"])]
    tok = Tokenizer.from_file(str(calibration["tokenizer_path"]))
    max_tokens, generate = int(calibration["max_tokens"]), int(calibration.get("generate", 8))
    interp = Interpreter(model_path=str(model_path))
    sigs = interp.get_signature_list()
    prefills = sorted((int(k.split("_", 1)[1]), k) for k in sigs if k.startswith("prefill_") and k.split("_", 1)[1].isdigit())
    if not prefills or "decode" not in sigs:
        raise protocol.BadInput(f"{model_path.name} has no prefill_N and decode signatures to calibrate through")
    plen, pkey = prefills[0]
    prefill, decode = interp.get_signature_runner(pkey), interp.get_signature_runner("decode")
    p_in, d_in = prefill.get_input_details(), decode.get_input_details()
    state_names = sorted(n for n in d_in if n not in ("tokens", "input_pos", "mask"))
    cache_len = int(d_in["mask"]["shape"][-1]) if "mask" in d_in else max_tokens + generate

    def feed(details, states, tokens, pos):
        args = {n: states[n] for n in state_names}
        args["tokens"] = np.asarray([tokens], dtype=details["tokens"]["dtype"])
        args["input_pos"] = np.asarray(pos, dtype=details["input_pos"]["dtype"])
        if "mask" in details:
            args["mask"] = _mask(np, pos, cache_len, details["mask"]["dtype"])
        return args

    # The lines joined into one token stream cut into prompts of max_tokens (a prompt shorter than a
    # prefill chunk would never reach the prefill signature: SmolLM2's lines are ~15 tokens, its chunk 32).
    length = min(max_tokens, cache_len - generate)
    if length <= plen:
        raise protocol.BadInput(f"calibration max_tokens {max_tokens} must exceed the prefill length {plen} (and fit the "
                                f"cache {cache_len} with {generate} generated tokens)")
    stream = [i for line in lines for i in tok.encode(line + "\n").ids]
    prompts = [stream[k:k + length] for k in range(0, len(stream), length) if len(stream[k:k + length]) > plen]
    if not prompts:
        raise protocol.BadInput(f"the calibration text gives fewer than {plen + 1} tokens: ship a longer one")
    prefill_samples, decode_calls = [], []
    for ids in prompts:
        states = {n: np.zeros(p_in[n]["shape"], dtype=p_in[n]["dtype"]) for n in state_names}
        pos = 0
        while len(ids) - pos > plen:  # at least the last prompt token goes through decode (its logits start the reply)
            args = feed(p_in, states, ids[pos:pos + plen], list(range(pos, pos + plen)))
            prefill_samples.append(args)
            out = prefill(**args)
            states = {n: np.array(out[n]) for n in state_names}
            pos += plen
        nxt = None
        while pos < len(ids) + generate and pos < cache_len:
            token = ids[pos] if pos < len(ids) else nxt
            args = feed(d_in, states, [token], [pos])
            decode_calls.append(args)
            out = decode(**args)
            states = {n: np.array(out[n]) for n in state_names}
            nxt = int(np.argmax(out["logits"].reshape(-1)))
            pos += 1
        if len(decode_calls) > 4 * RUNTIME_DECODE_SAMPLES:  # thin as we go: memory stays bounded
            decode_calls = decode_calls[::2]
    stride = max(1, len(decode_calls) // RUNTIME_DECODE_SAMPLES)
    data = {"decode": decode_calls[::stride][:RUNTIME_DECODE_SAMPLES]}
    if prefill_samples:
        data[pkey] = prefill_samples
    # Longer prefill signatures (a multi-length export): each line's first chunk, from an empty cache.
    for n, key in prefills[1:]:
        details = interp.get_signature_runner(key).get_input_details()
        data[key] = []
        for line in lines:
            ids = (tok.encode(line).ids + [0] * n)[:n]
            states = {s: np.zeros(details[s]["shape"], dtype=details[s]["dtype"]) for s in state_names}
            data[key].append(feed(details, states, ids, list(range(n))))
    return data


def _fresh_samples(model_path: Path, calibration: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Calibration samples for a static recipe: each text line tokenized with the model's own
    tokenizer and fed to every signature (prefill and decode: the quantizer needs ranges for the
    tensors of both) as its tokens and positions, the KV cache and any other input zero (a fresh
    conversation), at most `max_tokens` per sample and the signature's own length (a signature
    takes a fixed number of tokens: prefill the first N, padded with token 0; decode one token at
    position 0)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    from tokenizers import Tokenizer

    text = Path(calibration["text_path"]).read_text(encoding="utf-8")
    lines = [x for x in text.splitlines() if x.strip()][: int(calibration["samples"])]
    tok = Tokenizer.from_file(str(calibration["tokenizer_path"]))
    interp = Interpreter(model_path=str(model_path))
    data: dict[str, list[dict[str, Any]]] = {}
    for key, sig in interp.get_signature_list().items():
        if "tokens" not in sig.get("inputs", []):
            continue
        runner = interp.get_signature_runner(key)
        details = runner.get_input_details()
        samples = []
        for line in lines:
            ids = tok.encode(line).ids[: int(calibration["max_tokens"])]
            sample = {}
            for name, d in details.items():
                shape, dtype = [int(x) for x in d["shape"]], d["dtype"]
                arr = np.zeros(shape, dtype=dtype)
                if name in ("tokens", "input_pos"):
                    n = min(len(ids), shape[-1])
                    flat = arr.reshape(-1)
                    flat[:n] = ids[:n] if name == "tokens" else np.arange(n)
                sample[name] = arr
            samples.append(sample)
        data[key] = samples
    if not data:
        raise protocol.BadInput(f"{model_path.name} has no signature that takes tokens to calibrate on")
    return data


def _applicable(rules: list[dict]) -> Any:
    """(op type, scope) -> index of the rule the quantizer gives that op, or None: the last rule
    whose regex matches and whose operation is the op's or `*`, skipping entries whose config the
    algorithm refuses for this op type (recipe_manager.get_quantization_configs)."""
    from ai_edge_quantizer import algorithm_manager, qtyping

    compiled = [re.compile(r["regex"]) for r in rules]
    accepted: dict[tuple[int, str], bool] = {}

    def accepts(k: int, op_type: str) -> bool:
        rule = rules[k]
        if rule.get("algorithm_key") in (None, "no_quantize"):
            return True
        if (k, op_type) not in accepted:
            try:
                config = qtyping.OpQuantizationConfig.from_dict(rule.get("op_config") or {})
                algorithm_manager.check_op_quantization_config(rule["algorithm_key"], op_type, config)
                accepted[(k, op_type)] = True
            except (ValueError, KeyError, TypeError):
                accepted[(k, op_type)] = False
        return accepted[(k, op_type)]

    def which(op_type: str, scope: str) -> tuple[int | None, list[int]]:
        winner, matched = None, []
        for k, rule in enumerate(rules):
            if rule.get("operation", "*") not in ("*", op_type) or not compiled[k].search(scope):
                continue
            matched.append(k)
            if accepts(k, op_type):
                winner = k
        return winner, matched

    return which


def inspect_rules(buf: bytes | bytearray, rules: list[dict]) -> dict[str, Any]:
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils

    model = tflite.Model(buf)
    which = _applicable(rules) if rules else None
    per_rule = [{"matched_scopes": 0, "matched_ops": 0, "as_expected": 0, "read_back": Counter(),
                 "block_sizes": set(), "activation_types": Counter(), "op_types": set()} for _ in rules]
    quantized_ops: Counter[str] = Counter()
    float_ops: Counter[str] = Counter()
    rotation_ops = 0

    for sg in model.subgraphs():
        names = tflite.LazyTensorNames(sg)
        # A weight-only rule's op reads a DEQUANTIZE's output: map that output to its constant input.
        dequantized = tflite.dequantize_map(model, sg)
        for oi in range(sg.OperatorsLength()):
            op = sg.Operators(oi)
            op_type = model.opcodes[op.OpcodeIndex()]
            inputs = [int(x) for x in op.InputsAsNumpy()] if op.InputsLength() else []
            outputs = [int(x) for x in op.OutputsAsNumpy()] if op.OutputsLength() else []
            weights = []
            if op_type in tflite.WEIGHT_OPS:
                for i in inputs:
                    if i == -1:
                        continue
                    info = tflite.tensor_info(model, sg, dequantized.get(i, i))
                    if tflite.is_weight(info):
                        weights.append(info)
            if weights and tflite.rotation_op(model, op_type, weights):
                rotation_ops += 1  # a Hadamard rotation the quantizer inserted: not a model weight
                continue
            is_quantized = any(w["type"] in tflite.QINT_TYPES for w in weights)
            if weights:
                (quantized_ops if is_quantized else float_ops)[op_type] += 1
            if which is None:
                continue
            # The quantizer's own scope function, fed the two fields it reads.
            scope = tfl_flatbuffer_utils.get_op_scope(
                SimpleNamespace(inputs=inputs, outputs=outputs), names, max_length=_MAX_SCOPE
            )
            winner, matched = which(op_type, scope)
            for k in matched:
                per_rule[k]["matched_scopes"] += 1
            if winner is None or not weights:
                continue
            r, rule = per_rule[winner], rules[winner]
            r["matched_ops"] += 1
            r["op_types"].add(op_type)
            for w in weights:
                r["read_back"][w["type"]] += 1
                if w["block_size"]:
                    r["block_sizes"].add(w["block_size"])
            for o in outputs:
                if o != -1:
                    r["activation_types"][model.type_names.get(sg.Tensors(o).Type(), "?")] += 1
            bits = rule.get("expected_bits")
            if bits is None:
                r["as_expected"] += int(all(w["type"] == "FLOAT32" for w in weights))
            else:
                # A float16 weight (float casting) reads back as 16 bits, like its rule says.
                r["as_expected"] += int(all({**tflite.BITS, "FLOAT16": 16}.get(w["type"]) == bits for w in weights))

    return {
        "rules": [
            {"name": rule["name"], "regex": rule["regex"], "operation": rule.get("operation", "*"),
             "expected_bits": rule.get("expected_bits"), "matched_scopes": r["matched_scopes"],
             "matched_ops": r["matched_ops"], "as_expected": r["as_expected"],
             "read_back": dict(sorted(r["read_back"].items())), "block_sizes": sorted(r["block_sizes"]),
             "activation_types": dict(sorted(r["activation_types"].items())), "op_types": sorted(r["op_types"])}
            for rule, r in zip(rules, per_rule)
        ],
        "quantized_ops": dict(sorted(quantized_ops.items())),
        "float_ops": dict(sorted(float_ops.items())),
        "rotation_ops": rotation_ops,
    }


def _count_params(path: Path) -> int:
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return tflite.float_elements(tflite.Model(buf))

"""sensitivity: what quantizing each op group costs the model, measured teacher-forced on held-out
text; and what a whole quantized model costs (a recipe search's candidates).

Request:
    {"float_path": the float export (.tflite),
     "model_dir": the HF folder it was converted from (the PyTorch reference),
     "text_path": the held-out evaluation text (never the calibration text),
     "positions": scored positions (>= 1; the text's tokens are cut into windows of "window"
       tokens, each scored from a fresh context, until this many positions are scored),
     "window": tokens per window,
     "patterns": [{"name": "layer{layer}.mlp", "op": "FULLY_CONNECTED", "regex": "...(?P<layer>\\d+)..."}]
       the family's op groups, most specific first: every weight op of the float export is given
       to the first pattern whose op type and regex match its scope (the quantizer's
       get_op_scope); `{layer}` in the name and `(?P<layer>\\d+)` in the regex make one group per
       layer, the group's own regex being the pattern's with that layer number written in,
     "groups_only": true -> only the groups (no model is loaded),
     "treatments": [{"name", "algorithm_key", "op_config", "overrides": {group: {"algorithm_key",
       "op_config"}}}]: each applied to every group at once (one real quantization per treatment;
       an override gives one group another config, "no_quantize" keeps it float); each group is
       then scored alone with its weights as that file holds them, the others float,
     "only_groups": optional list of group names to score (default: every group),
     "candidates": [{"name", "quantized_path"}]: quantized models made from this float export,
       scored whole,
     "interpreter_positions": positions checked through the real Interpreter (0: off),
     "calibration": the quantize command's calibration request (static treatments only: their
       activation ranges are calibrated once, and each group is measured through the Interpreter),
     "prefill_length": the export's prefill signature used for that check,
     "work_dir": a folder for the treatments' quantized files,
     "source_grid": {"algorithm_key", "op_config"} when the float export is a source-grid one
       (farm_toolchain/grid.py): the PyTorch model is split the same way (so its weights match the
       export's byte for byte), every quantization ends with this entry for the split layers'
       offsets, and dequantized-weight recovery applies only to groups whose layers were split}

How a group is scored (the PyTorch float32 model, its weights replaced by what the file holds):
- The quantized file is read back op by op (farm_toolchain/tflite.py `dequantized`: int values
  times their scales, blockwise or per channel, exactly as written); each weight is matched to its
  PyTorch parameter by the bytes of the float export's copy (the export stores each float weight
  byte for byte; a tied embedding and lm_head share one buffer and are untied for the measurement,
  the EMBEDDING_LOOKUP op taking the nn.Embedding, the FULLY_CONNECTED op the nn.Linear).
- An integer weight read by the op directly (no DEQUANTIZE in front) is a dynamic-range op: the
  runtime quantizes its float input per row to int8 (asymmetric) before the integer matmul, which
  is simulated (per-token asymmetric int8 fake quantization of the Linear's input). A weight
  behind a DEQUANTIZE (weight-only, float casting) is used as dequantized. Static (integer
  activation) ops and Hadamard-rotated weights (the quantizer rotates the stored weight and inserts
  the inverse rotation into the graph) are not simulated: each group's figures come from the
  Interpreter on the exact bytes (`_interpreter_treatment`).
- Teacher forcing: the reference's log-probabilities, every layer's input and the last layer's
  output are recorded once; a group in layer L re-runs layers L.. (the layers before it return
  their recorded outputs), the lm_head only the final norm and head.
- Metrics per group over every scored position: kl = mean KL(reference ‖ quantized) in nats,
  top1 = agreement of the argmaxes, nll_delta = mean change of the next token's negative
  log-likelihood, weight_rel_error = ‖W_q − W‖ / ‖W‖ over the group's weights.
- The simulation is checked against the real thing: for each treatment's all-groups file and
  each candidate, the ai_edge_litert Interpreter runs the exact bytes (prefill, then one decode per
  position: farm_toolchain/gates/logits_parity.py's own driving loop) over the first
  `interpreter_positions` positions of the first window, and both the Interpreter's and the
  simulation's KL against the reference over those positions are reported (`interpreter_check`).

Bytes per group: the distinct buffers its ops' weights (and blockwise scales) occupy, plus
per-channel scale arrays; a buffer two groups share (a tied embedding and lm_head quantized alike)
is split between them. The real file size of a recipe is what the quantize stage writes.

Result: {"groups": [{"name", "op", "regex", "layer", "ops", "params", "float_bytes"}],
 "ungrouped": [...], "tokens", "positions", "windows", "reference": {"nll", "seconds"},
 "treatments": [{"name", "seconds", "file_bytes", "not_applicable": {group: why},
                 "scores": [{"group", "kl", "top1", "nll_delta", "weight_rel_error", "bytes",
                             "simulated": "dynamic_int8_inputs" | "weights_only", "seconds"}],
                 "all": {metrics of every group at once}, "interpreter_check": {...}}],
 "candidates": [{"name", "kl", "top1", "nll_delta", "interpreter_check", "quantized_groups"}]}
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from farm_toolchain import grid, protocol, tflite
from farm_toolchain.commands import COMMANDS, OFFLINE
from farm_toolchain.gates import common
from farm_common.algorithms import GRID_OFFSET_REGEX, GRID_SYM_REGEX, RECOVERY, ROTATED_BLOCKWISE_TABLE, ROTATIONS
from farm_toolchain.protocol import BadInput

LAYER = "(?P<layer>\\d+)"


# --- request --------------------------------------------------------------------------------------


def _parse(request: dict[str, Any]) -> dict[str, Any]:
    float_path = common.require_file(request, "float_path", "the float export (.tflite) the groups are read from")
    patterns = request.get("patterns")
    if not isinstance(patterns, list) or not patterns:
        raise BadInput("patterns is required: [{name, op, regex}] the family's op groups, most specific first")
    compiled = []
    for i, p in enumerate(patterns):
        if not isinstance(p, dict) or not all(isinstance(p.get(k), str) and p.get(k) for k in ("name", "op", "regex")):
            raise BadInput(f"pattern {i} needs name, op and regex (strings)")
        try:
            rx = re.compile(p["regex"])
        except re.error as exc:
            raise BadInput(f"pattern {p['name']!r}: regex does not compile: {exc}") from None
        per_layer = "layer" in rx.groupindex
        if per_layer != ("{layer}" in p["name"]):
            raise BadInput(f"pattern {p['name']!r}: a per-layer pattern needs both {{layer}} in its name and "
                           f"{LAYER} in its regex")
        compiled.append({**p, "rx": rx, "per_layer": per_layer})
    req: dict[str, Any] = {"float_path": float_path, "patterns": compiled,
                           "groups_only": bool(request.get("groups_only", False))}
    if req["groups_only"]:
        return req
    req["model_dir"] = common.model_folder(request)
    req["text_path"] = common.require_file(request, "text_path", "the held-out evaluation text")
    req["positions"] = common.int_arg(request, "positions", 2048)
    req["window"] = common.int_arg(request, "window", 512, minimum=8)
    req["interpreter_positions"] = common.int_arg(request, "interpreter_positions", 32, minimum=0)
    req["prefill_length"] = common.int_arg(request, "prefill_length", 8)
    treatments = request.get("treatments") or []
    candidates = request.get("candidates") or []
    if not isinstance(treatments, list) or not isinstance(candidates, list) or not (treatments or candidates):
        raise BadInput("give treatments ([{name, algorithm_key, op_config}]) or candidates ([{name, quantized_path}])")
    for t in treatments:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not isinstance(t.get("algorithm_key"), str):
            raise BadInput("each treatment needs a name and an algorithm_key (and op_config)")
    for c in candidates:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise BadInput("each candidate needs a name and a quantized_path")
        common.require_file(c, "quantized_path", "a quantized .tflite made from float_path")
    req["treatments"], req["candidates"] = treatments, candidates
    req["calibration"] = request.get("calibration")
    grid = request.get("source_grid")
    if grid is not None and (not isinstance(grid, dict) or not isinstance(grid.get("algorithm_key"), str)):
        raise BadInput("source_grid must be {algorithm_key, op_config}: the entry for the split layers' offsets")
    req["source_grid"] = grid
    only = request.get("only_groups")
    req["only_groups"] = set(only) if isinstance(only, list) else None
    if treatments:
        work = request.get("work_dir")
        if not isinstance(work, str) or not Path(work).is_dir():
            raise BadInput("work_dir is required with treatments: an existing folder for their quantized files")
        req["work_dir"] = Path(work)
    return req


# --- groups ---------------------------------------------------------------------------------------


def assign_groups(ops: list[dict[str, Any]], patterns: list[dict[str, Any]]) -> tuple[dict[str, dict], list[dict]]:
    """{group name: {"name", "op", "regex", "layer", "keys": [op keys], "buffers": {float buffer
    indices}, "order"}}, and the weight ops no pattern takes (kept float by a recipe search).
    A group's regex is its pattern's with the layer number written in; `order` is the pattern's
    index (the most specific first), which a recipe reverses (the quantizer's last match wins)."""
    groups: dict[str, dict[str, Any]] = {}
    ungrouped = []
    for op in ops:
        for k, p in enumerate(patterns):
            if p["op"] not in ("*", op["type"]):
                continue
            m = p["rx"].search(op["scope"])
            if m is None:
                continue
            layer = int(m.group("layer")) if p["per_layer"] else None
            name = p["name"].format(layer=layer) if p["per_layer"] else p["name"]
            regex = p["regex"].replace(LAYER, str(layer)) if p["per_layer"] else p["regex"]
            g = groups.setdefault(name, {"name": name, "op": op["type"] if p["op"] == "*" else p["op"], "regex": regex,
                                         "layer": layer, "keys": [], "buffers": set(), "order": k})
            g["keys"].append(op["key"])
            g["buffers"].update(w["buffer"] for w in op["weights"])
            break
        else:
            ungrouped.append({"type": op["type"], "scope": op["scope"][-200:],
                              "buffers": sorted({w["buffer"] for w in op["weights"]})})
    return groups, ungrouped


def recipe_order(groups: dict[str, dict]) -> list[dict]:
    """Groups in the order their rules go into a recipe: generic patterns first, specific last (the
    quantizer applies every matching entry and the last wins, the reverse of `assign_groups`)."""
    return sorted(groups.values(), key=lambda g: (-g["order"], g["layer"] if g["layer"] is not None else -1, g["name"]))


def _group_summary(model: tflite.Model, groups: dict[str, dict], ungrouped: list[dict]) -> dict[str, Any]:
    elements = _buffer_elements(model)
    share = _sharing(groups)
    rows = []
    for g in sorted(groups.values(), key=_display_order):
        # Groups that read one float buffer (a tied embedding and lm_head): quantized alike they
        # share one quantized buffer, quantized differently each gets its own copy.
        shared = sorted({o["name"] for o in groups.values() if o is not g and o["buffers"] & g["buffers"]})
        rows.append({"name": g["name"], "op": g["op"], "regex": g["regex"], "layer": g["layer"], "ops": len(g["keys"]),
                     "shares_weights_with": shared,
                     "params": int(sum(elements.get(b, 0) / share[b] for b in g["buffers"])),
                     "float_bytes": int(sum(model.buffer_bytes(b) / share[b] for b in g["buffers"]))})
    return {"groups": rows, "params": tflite.float_elements(model), "weight_bytes": model.weight_bytes(), "ungrouped": [
        {**u, "bytes": int(sum(model.buffer_bytes(b) for b in u["buffers"]))} for u in ungrouped]}


def _display_order(g: dict) -> tuple:
    first = 0 if g["op"] == "EMBEDDING_LOOKUP" else 2 if g["layer"] is None else 1
    return (first, g["layer"] if g["layer"] is not None else 0, g["name"])


def _sharing(groups: dict[str, dict]) -> dict[int, int]:
    count: dict[int, int] = {}
    for g in groups.values():
        for b in g["buffers"]:
            count[b] = count.get(b, 0) + 1
    return count


def _buffer_elements(model: tflite.Model) -> dict[int, int]:
    out: dict[int, int] = {}
    for sg in model.subgraphs():
        for ti in range(sg.TensorsLength()):
            t = sg.Tensors(ti)
            if model.buffer_has_data(t.Buffer()):
                n = 1
                for d in t.ShapeAsNumpy() if t.ShapeLength() else []:
                    n *= int(d)
                out[t.Buffer()] = max(out.get(t.Buffer(), 0), n)
    return out


# --- the PyTorch side -----------------------------------------------------------------------------


def decoder_layers(model: Any) -> Any:
    """The model's decoder layers (`model.model.layers` for every family the farm converts)."""
    import torch

    for name, module in model.named_modules():
        if name.endswith("layers") and isinstance(module, torch.nn.ModuleList) and len(module) > 0:
            return module
    raise BadInput(f"{type(model).__name__} has no ModuleList of decoder layers named *layers")


def untie(model: Any) -> None:
    """Give a tied lm_head its own Parameter (same values), so the embedding and the head can be
    measured apart, as the quantizer treats their two ops."""
    import torch

    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and emb is not None and head.weight is emb.weight:
        head.weight = torch.nn.Parameter(emb.weight.detach().clone(), requires_grad=False)


def param_index(model: Any) -> dict[str, list[tuple[str, Any]]]:
    """sha256 of a 2-D parameter's float32 bytes -> [(name, module)]."""
    import torch

    index: dict[str, list[tuple[str, Any]]] = {}
    for mname, module in model.named_modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            w = module.weight.detach()
            if w.dim() != 2:
                continue
            h = hashlib.sha256(w.contiguous().numpy().astype("float32", copy=False).tobytes()).hexdigest()
            index.setdefault(h, []).append((mname, module))
    return index


def map_weights(fm: tflite.Model, fops: list[dict], index: dict[str, list]) -> dict[Any, Any]:
    """Float export op key -> the PyTorch module whose weight it holds (by the weight's bytes)."""
    import torch

    out: dict[Any, Any] = {}
    for op in fops:
        w = op["weights"][0]
        if w["type"] != "FLOAT32":
            continue
        h = hashlib.sha256(tflite.buffer_data(fm, w["buffer"]).tobytes()).hexdigest()
        want = torch.nn.Embedding if op["type"] == "EMBEDDING_LOOKUP" else torch.nn.Linear
        match = [m for _n, m in index.get(h, []) if isinstance(m, want)]
        if match:
            out[op["key"]] = match[0]
    return out


def _fake_quant_rows(x: Any) -> Any:
    """Per-row asymmetric int8 quantize-dequantize: the runtime's dynamic-range input."""
    import torch

    lo = torch.clamp(x.amin(-1, keepdim=True), max=0.0)
    hi = torch.clamp(x.amax(-1, keepdim=True), min=0.0)
    scale = torch.clamp((hi - lo) / 255.0, min=1e-12)
    zero = torch.round(-lo / scale) - 128.0
    q = torch.clamp(torch.round(x / scale) + zero, -128.0, 127.0)
    return (q - zero) * scale


class Scorer:
    """The reference's log-probabilities and every layer's input, recorded once; then any set of
    replaced weights scored against it."""

    def __init__(self, model: Any, windows: list[list[int]]):
        import torch

        self.model = model
        self.layers = decoder_layers(model)
        self.windows = windows
        self.ref: list[Any] = []
        self.cache: list[list[Any]] = []  # per window: inputs of layers 0..N-1, then the last output
        self.targets = [torch.tensor(w[1:], dtype=torch.long) for w in windows]
        n = len(self.layers)
        for ids in windows:
            seen: list[Any] = [None] * (n + 1)
            hooks = []
            for k, layer in enumerate(self.layers):
                hooks.append(layer.register_forward_pre_hook(
                    lambda _m, args, kwargs, k=k: seen.__setitem__(k, (args[0] if args else kwargs["hidden_states"]).detach()),
                    with_kwargs=True))
            hooks.append(self.layers[-1].register_forward_hook(
                lambda _m, _a, out: seen.__setitem__(n, (out[0] if isinstance(out, tuple) else out).detach())))
            try:
                with torch.no_grad():
                    logits = model(torch.tensor([ids], dtype=torch.long)).logits[0].float()
            finally:
                for h in hooks:
                    h.remove()
            self.ref.append(torch.log_softmax(logits, -1))
            self.cache.append(seen)

    def nll(self) -> float:
        total, count = 0.0, 0
        for lp, tgt in zip(self.ref, self.targets):
            total += float(-lp[:-1].gather(1, tgt[:, None]).sum())
            count += len(tgt)
        return total / max(count, 1)

    @contextmanager
    def _start_at(self, start: int, w: int) -> Iterator[None]:
        """Layers before `start` hand on their recorded outputs instead of computing them."""
        saved = []
        if start > 0:
            cached = self.cache[w][start]
            for k in range(start):
                layer = self.layers[k]
                saved.append((layer, layer.__dict__.get("forward")))
                if k == start - 1:
                    layer.forward = lambda *a, _c=cached, **kw: _c
                else:
                    layer.forward = lambda *a, **kw: a[0] if a else kw["hidden_states"]
        try:
            yield
        finally:
            for layer, fwd in saved:
                if fwd is None:
                    del layer.forward
                else:
                    layer.forward = fwd

    def score(self, replace: dict[Any, tuple[Any, bool]], start: int = 0, keep: int = 0) -> dict[str, Any]:
        """Metrics with `replace` ({module: (float32 weight, dynamic-range input)}) in place; the
        simulated log-probabilities of the first `keep` positions of window 0 are returned too."""
        import torch
        import torch.nn.functional as F

        originals = {}
        for module, (weight, dynamic) in replace.items():
            originals[module] = (module.weight.data, module.__dict__.get("forward"))
            module.weight.data = torch.as_tensor(weight, dtype=torch.float32).reshape(module.weight.shape)
            if dynamic and isinstance(module, torch.nn.Linear):
                module.forward = lambda x, _m=module: F.linear(_fake_quant_rows(x), _m.weight, _m.bias)
        kl_sum, top1_sum, nll_sum, count, kept = 0.0, 0.0, 0.0, 0, None
        try:
            for w, ids in enumerate(self.windows):
                with self._start_at(start, w), torch.no_grad():
                    logits = self.model(torch.tensor([ids], dtype=torch.long)).logits[0].float()
                lq = torch.log_softmax(logits, -1)
                lp = self.ref[w]
                kl = (lp.exp() * (lp - lq)).sum(-1).clamp(min=0)
                kl_sum += float(kl.sum())
                top1_sum += float((lp.argmax(-1) == lq.argmax(-1)).sum())
                tgt = self.targets[w]
                nll_sum += float(-lq[:-1].gather(1, tgt[:, None]).sum() + lp[:-1].gather(1, tgt[:, None]).sum())
                count += len(ids)
                if w == 0 and keep:
                    kept = lq[:keep].clone()
        finally:
            for module, (data, fwd) in originals.items():
                module.weight.data = data
                if fwd is None:
                    module.__dict__.pop("forward", None)
                else:
                    module.forward = fwd
        targets = sum(len(t) for t in self.targets)
        return {"kl": kl_sum / count, "top1": top1_sum / count, "nll_delta": nll_sum / max(targets, 1),
                "positions": count, "_kept": kept}


def windows_of(prefix: list[int], body: list[int], positions: int, window: int) -> list[list[int]]:
    """Windows of `window` ids (the prefix, then the text's next ids) until `positions` are scored."""
    step = window - len(prefix)
    if step < 1:
        raise BadInput(f"window {window} is not longer than the tokenizer's prefix {prefix}")
    need = -(-positions // window) * step
    if len(body) < need:
        raise BadInput(f"the evaluation text has {len(body)} tokens with this tokenizer, fewer than the {need} that "
                       f"{positions} positions in windows of {window} need: ship a longer text or ask for fewer positions")
    out, left, i = [], positions, 0
    while left > 0:
        n = min(step, left - len(prefix)) if left < window else step
        out.append(prefix + body[i:i + n])
        i += n
        left -= len(out[-1])
    return out


# --- reading a quantized file back ----------------------------------------------------------------


def read_back(path: Path, fops_by_key: dict[Any, dict], modules: dict[Any, Any]) -> dict[str, Any]:
    """What a quantized model made from the float export holds, per float op key: the module, its
    weight as the file holds it (float32 values), whether the op quantizes its input at run time
    (an integer weight with no DEQUANTIZE in front), the weight's stored type, and the bytes."""
    import numpy as np

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        qm = tflite.Model(buf)
        ops = tflite.weight_ops(qm)
        readers = [set(tflite.dequantize_map(qm, sg).values()) for sg in qm.subgraphs()]
        out: dict[Any, dict[str, Any]] = {}
        buffer_owner: dict[int, Any] = {}
        for op in ops:
            if op["key"] not in fops_by_key:
                continue
            w = op["weights"][0]
            entry = {"type": w["type"], "block_size": w["block_size"], "buffer": w["buffer"],
                     "through_dequantize": w["index"] in readers[op["subgraph"]],
                     "bytes": _stored_bytes(qm, op["sg"], w)}
            if w["buffer"] in buffer_owner:
                entry["weight"] = out[buffer_owner[w["buffer"]]]["weight"]
            else:
                entry["weight"] = np.array(tflite.dequantized(qm, op["sg"], w), dtype=np.float32, copy=True)
                buffer_owner[w["buffer"]] = op["key"]
            entry["module"] = modules.get(op["key"])
            entry["dynamic"] = w["type"] in tflite.QINT_TYPES and not entry["through_dequantize"]
            out[op["key"]] = entry
        return out


def _rotated(path: Path) -> bool:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return tflite.count_rotation_ops(tflite.Model(buf)) > 0


def _stored_bytes(model: tflite.Model, sg: Any, info: dict[str, Any]) -> dict[int, int]:
    """{buffer index: bytes} a weight occupies: its own buffer, a blockwise scale tensor's buffer,
    and per-channel scales / zero points (counted under the weight's buffer)."""
    out = {info["buffer"]: model.buffer_bytes(info["buffer"])}
    q = sg.Tensors(info["index"]).Quantization()
    if q is not None:
        out[info["buffer"]] += q.ScaleLength() * 4 + q.ZeroPointLength() * 8
        if info["block_size"]:
            details = model.schema.BlockwiseQuantization()
            table = q.Details()
            details.Init(table.Bytes, table.Pos)
            s = sg.Tensors(int(details.Scales()))
            out[s.Buffer()] = model.buffer_bytes(s.Buffer())
    return out


def _group_bytes(groups: dict[str, dict], held: dict[Any, dict]) -> dict[str, float]:
    owners: dict[int, set[str]] = {}
    per_group: dict[str, dict[int, int]] = {}
    for g in groups.values():
        mine: dict[int, int] = {}
        for key in g["keys"]:
            if key in held:
                mine.update(held[key]["bytes"])
        per_group[g["name"]] = mine
        for b in mine:
            owners.setdefault(b, set()).add(g["name"])
    return {name: sum(size / len(owners[b]) for b, size in mine.items()) for name, mine in per_group.items()}


def _replacements(keys: list[Any], held: dict[Any, dict]) -> dict[Any, tuple[Any, bool]]:
    out = {}
    for key in keys:
        e = held.get(key)
        if e is None or e["module"] is None or e["type"] == "FLOAT32":
            continue
        out[e["module"]] = (e["weight"], e["dynamic"])
    return out


def _rel_error(keys: list[Any], held: dict[Any, dict]) -> float | None:
    import numpy as np

    num = den = 0.0
    seen = set()
    for key in keys:
        e = held.get(key)
        if e is None or e["module"] is None or id(e["module"]) in seen:
            continue
        seen.add(id(e["module"]))
        ref = e["module"].weight.detach().numpy()
        num += float(np.sum((e["weight"].reshape(ref.shape) - ref) ** 2))
        den += float(np.sum(ref ** 2))
    return (num / den) ** 0.5 if den > 0 else None


# --- the Interpreter check ------------------------------------------------------------------------


def interpreter_check(path: Path, ids: list[int], plen: int, count: int, ref_lp: Any, sim_lp: Any) -> dict[str, Any]:
    """The exact bytes through the ai_edge_litert Interpreter (logits_parity's driving loop) over
    positions plen..plen+count-1, against the reference and against the simulation."""
    import torch

    from farm_toolchain import tflite_run

    total = plen + count
    try:
        opened = tflite_run.open_decoder(path, plen, total)
    except BadInput as exc:
        return {"ran": False, "why": str(exc)}
    t0 = time.monotonic()
    lt = tflite_run.run_decoder(opened, ids[:total], plen, 1)
    lq = torch.log_softmax(torch.as_tensor(lt, dtype=torch.float32), -1)
    lp = ref_lp[plen:total]
    sim = sim_lp[plen:total] if sim_lp is not None else None

    def kl(a, b):
        return float((a.exp() * (a - b)).sum(-1).clamp(min=0).mean())

    out = {"ran": True, "positions": count, "first_position": plen, "seconds": round(time.monotonic() - t0, 2),
           "kl_interpreter": kl(lp, lq), "top1_interpreter": float((lp.argmax(-1) == lq.argmax(-1)).float().mean())}
    if sim is not None:
        out.update({"kl_simulated": kl(lp, sim), "top1_simulated": float((lp.argmax(-1) == sim.argmax(-1)).float().mean()),
                    "top1_simulated_vs_interpreter": float((sim.argmax(-1) == lq.argmax(-1)).float().mean())})
    return out


# --- the command ----------------------------------------------------------------------------------


@COMMANDS.register("sensitivity", env=OFFLINE)
def handle(request: dict[str, Any]) -> dict[str, Any]:
    req = _parse(request)
    started = time.monotonic()
    with open(req["float_path"], "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as fbuf:
        fm = tflite.Model(fbuf)
        fops = tflite.weight_ops(fm)
        groups, ungrouped = assign_groups(fops, req["patterns"])
        if not groups:
            raise BadInput("no weight op of the float export matches any pattern: the family's group patterns do not "
                           "fit this export's op scopes")
        summary = _group_summary(fm, groups, ungrouped)
        if req["groups_only"]:
            return summary
        import torch

        torch.set_num_threads(max(1, os.cpu_count() or 1))
        tokenizer, model = common.load_reference(req["model_dir"], protocol.progress)
        if req.get("source_grid"):
            # Split as the export did (before untying: the tied lm_head is left whole there too).
            split = grid.split_model(model)
            protocol.progress(f"source_grid: {len(split['split'])} linear layers split as in the export")
        untie(model)
        modules = map_weights(fm, fops, param_index(model))
        fops_by_key = {op["key"]: op for op in fops}
        unmapped = sorted({g["name"] for g in groups.values() for k in g["keys"] if k not in modules})
        if unmapped:
            raise BadInput(f"the weights of group(s) {', '.join(unmapped[:5])} match no PyTorch parameter byte for byte: "
                           "the export changed them (fused or scaled), so they cannot be measured by substitution")

    text = req["text_path"].read_text(encoding="utf-8")
    prefix, body = text_ids(tokenizer, model.config, text)
    windows = windows_of(prefix, body, req["positions"], req["window"])
    ids = prefix + body
    n_layers = len(decoder_layers(model))
    protocol.progress(f"reference: {len(windows)} window(s) of {req['window']} tokens, {n_layers} layers")
    t_ref = time.monotonic()
    scorer = Scorer(model, windows)
    result: dict[str, Any] = {**summary, "tokens": len(ids), "positions": sum(len(w) for w in windows),
                              "windows": len(windows), "window": req["window"],
                              "reference": {"nll": scorer.nll(), "seconds": round(time.monotonic() - t_ref, 2)},
                              "treatments": [], "candidates": []}
    keep = req["prefill_length"] + req["interpreter_positions"] if req["interpreter_positions"] else 0
    keep = min(keep, len(windows[0]))

    def start_of(g: dict) -> int:
        if g["op"] == "EMBEDDING_LOOKUP":
            return 0
        return g["layer"] if g["layer"] is not None else n_layers

    for t in req["treatments"]:
        result["treatments"].append(_treatment(req, t, groups, fops_by_key, modules, scorer, start_of, keep, windows[0]))
    for c in req["candidates"]:
        cpath = Path(c["quantized_path"])
        held = read_back(cpath, fops_by_key, modules)
        quantized = sorted({g["name"] for g in groups.values() for k in g["keys"]
                            if k in held and held[k]["type"] != "FLOAT32"})
        if _rotated(cpath):
            # Its stored weights are rotated and its graph rotates their inputs: PyTorch with the
            # stored weights would measure another model. The exact bytes through the Interpreter.
            check = interpreter_check(cpath, windows[0], req["prefill_length"], max(32, req["interpreter_positions"]),
                                      scorer.ref[0], None)
            m = {"kl": check.get("kl_interpreter"), "top1": check.get("top1_interpreter"), "nll_delta": None,
                 "positions": check.get("positions"), "measured_by": "interpreter"}
        else:
            m = scorer.score(_replacements(list(held), held), 0, keep)
            kept = m.pop("_kept")
            check = (interpreter_check(cpath, windows[0], req["prefill_length"], req["interpreter_positions"],
                                       scorer.ref[0], kept)
                     if req["interpreter_positions"] else {"ran": False, "why": "interpreter_positions is 0"})
        result["candidates"].append({"name": c["name"], **m, "interpreter_check": check, "quantized_groups": quantized,
                                     "file_bytes": cpath.stat().st_size})
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def text_ids(tokenizer: Any, config: Any, text: str) -> tuple[list[int], list[int]]:
    """(prefix, body): the ids the model's own tokenizer puts before any text (a start token for
    models that are trained with one, e.g. Gemma's <bos>; nothing for SmolLM2), and the text's ids
    without them, the pad id dropped (logits_parity's rule: the export masks pad tokens). Every
    window starts with the prefix, as the runtime prefills it."""
    pad = getattr(config, "pad_token_id", None)
    prefix = [i for i in tokenizer("", add_special_tokens=True)["input_ids"] if i != pad]
    body = [i for i in tokenizer(text, add_special_tokens=False)["input_ids"] if i != pad]
    return prefix, body


def _blocks_misfit(group: dict, fops_by_key: dict, spec: dict) -> str | None:
    """Why a blockwise config cannot apply to a group (a weight whose blocked axis, the last, is not
    a multiple of the block: the quantizer fails the whole model on it), or None."""
    granularity = str(((spec.get("op_config") or {}).get("weight_tensor_config") or {}).get("granularity", ""))
    if not granularity.startswith("BLOCKWISE_"):
        return None
    block = int(granularity.split("_")[1])
    for key in group["keys"]:
        if _is_offset(fops_by_key[key]):
            continue  # a split layer's offsets take the request's source_grid entry, not the group's
        for w in fops_by_key[key]["weights"]:
            if w["shape"] and w["shape"][-1] % block:
                return f"a weight of shape {w['shape']} does not split into blocks of {block}"
    return None


def _is_offset(op: dict) -> bool:
    return GRID_OFFSET_REGEX in op["scope"]  # a plain string as a regex


def _not_split(group: dict, fops_by_key: dict) -> str | None:
    """Why dequantized-weight recovery cannot apply to a group: an op of it the source-grid export
    did not split (its weights are not on a symmetric grid, and recovery fails the whole file)."""
    for key in group["keys"]:
        scope = fops_by_key[key]["scope"]
        if GRID_SYM_REGEX not in scope and GRID_OFFSET_REGEX not in scope:  # plain strings as regexes
            return "its weights are not on a 4-bit grid (a layer the source-grid export did not split)"
    return None


def _with_offsets(req: dict, entries: list[dict]) -> list[dict]:
    """A quantization's entries, and last (it wins) the split layers' offsets entry."""
    spec = req.get("source_grid")
    if not spec or not entries:
        return entries
    return [*entries, {"regex": GRID_OFFSET_REGEX, "operation": "FULLY_CONNECTED", "algorithm_key": spec["algorithm_key"],
                       "op_config": spec.get("op_config") or {}}]


def _treatment(req: dict, t: dict, groups: dict[str, dict], fops_by_key: dict, modules: dict, scorer: Scorer,
               start_of: Any, keep: int, window0: list[int]) -> dict[str, Any]:
    """One treatment on every group it applies to (one real quantization), then each group scored
    alone and all of them together."""
    from ai_edge_quantizer import algorithm_manager, qtyping
    from ai_edge_quantizer import quantizer as quantizer_lib

    t0 = time.monotonic()
    name = t["name"]
    overrides = t.get("overrides") or {}
    not_applicable: dict[str, str] = {}
    kept_float: list[str] = []
    entries = []
    for g in recipe_order(groups):
        spec = overrides.get(g["name"]) or t
        if spec["algorithm_key"] == "no_quantize":
            kept_float.append(g["name"])
            continue
        try:
            config = qtyping.OpQuantizationConfig.from_dict(spec.get("op_config") or {})
            algorithm_manager.check_op_quantization_config(spec["algorithm_key"], g["op"], config)
        except (ValueError, KeyError, TypeError) as exc:
            not_applicable[g["name"]] = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            continue
        if (why := _blocks_misfit(g, fops_by_key, spec)) is not None:
            not_applicable[g["name"]] = why
            continue
        if spec["algorithm_key"] == RECOVERY and (why := _not_split(g, fops_by_key)) is not None:
            not_applicable[g["name"]] = why
            continue
        granularity = str(((spec.get("op_config") or {}).get("weight_tensor_config") or {}).get("granularity", ""))
        if spec["algorithm_key"] in ROTATIONS and g["op"] == "EMBEDDING_LOOKUP" and granularity.startswith("BLOCKWISE"):
            not_applicable[g["name"]] = ROTATED_BLOCKWISE_TABLE
            continue
        entries.append({"regex": g["regex"], "operation": g["op"], "algorithm_key": spec["algorithm_key"],
                        "op_config": spec.get("op_config") or {}})
    out: dict[str, Any] = {"name": name, "not_applicable": not_applicable, "kept_float": kept_float, "scores": []}
    if not entries:
        out["seconds"] = round(time.monotonic() - t0, 2)
        return out
    if any((e["op_config"] or {}).get("activation_tensor_config") or e["algorithm_key"] in ROTATIONS for e in entries):
        return _interpreter_treatment(req, t, out, entries, groups, fops_by_key, modules, scorer, window0, t0)
    protocol.progress(f"{name}: quantizing {len(entries)} groups")
    qt = quantizer_lib.Quantizer(str(req["float_path"]))
    try:
        qt.load_quantization_recipe(_with_offsets(req, entries))
        quantized = qt.quantize(enable_progress_report=False).quantized_model
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        out["error"] = f"ai_edge_quantizer: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__}"
        out["seconds"] = round(time.monotonic() - t0, 2)
        return out
    path = req["work_dir"] / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.tflite"
    path.write_bytes(quantized)
    del quantized, qt
    out["file_bytes"] = path.stat().st_size
    held = read_back(path, fops_by_key, modules)
    sizes = _group_bytes(groups, held)
    todo = [g for g in sorted(groups.values(), key=_display_order)
            if g["name"] not in not_applicable and g["name"] not in kept_float
            and (req["only_groups"] is None or g["name"] in req["only_groups"])]
    for n, g in enumerate(todo):
        repl = _replacements(g["keys"], held)
        if not repl:
            not_applicable[g["name"]] = "the quantizer left every weight of this group float"
            continue
        t_g = time.monotonic()
        m = scorer.score(repl, start_of(g))
        m.pop("_kept")
        dynamic = any(d and not hasattr(mod, "padding_idx") for mod, (_w, d) in repl.items())  # Linear, not Embedding
        out["scores"].append({"group": g["name"], "treatment": (overrides.get(g["name"]) or t)["name"], **m, "bytes": int(round(sizes[g["name"]])),
                              "stored": sorted({held[k]["type"] for k in g["keys"] if k in held}),
                              "weight_rel_error": _rel_error(g["keys"], held),
                              "simulated": "dynamic_int8_inputs" if dynamic else "weights_only",
                              "seconds": round(time.monotonic() - t_g, 2)})
        protocol.progress(f"{name}: {n + 1}/{len(todo)} {g['name']}: KL {m['kl']:.4g}, top-1 {m['top1']:.3f}")
    all_keys = [k for g in groups.values() if g["name"] not in not_applicable and g["name"] not in kept_float
                for k in g["keys"]]
    m = scorer.score(_replacements(all_keys, held), 0, keep)
    kept = m.pop("_kept")
    out["all"] = {**m, "bytes": int(round(sum(sizes[g] for g in groups if g not in not_applicable and g not in kept_float)))}
    out["interpreter_check"] = (interpreter_check(path, window0, req["prefill_length"], req["interpreter_positions"],
                                                  scorer.ref[0], kept)
                                if req["interpreter_positions"] else {"ran": False, "why": "interpreter_positions is 0"})
    out["seconds"] = round(time.monotonic() - t0, 2)
    path.unlink(missing_ok=True)
    return out


def _interpreter_treatment(req: dict, t: dict, out: dict, entries: list[dict], groups: dict[str, dict],
                           fops_by_key: dict, modules: dict, scorer: Scorer, window0: list[int], t0: float) -> dict[str, Any]:
    """A treatment PyTorch does not simulate, measured through the Interpreter on the exact bytes:
    KL and top-1 over `interpreter_positions` (at least 32) positions of the first window, each
    group quantized alone, then all of them. Static (integer-activation) treatments have their
    activation ranges calibrated once on the request's calibration set (the quantize command's own
    samples) and every group is quantized with those ranges; a Hadamard rotation rewrites the graph
    around the weight (its stored weight is the rotated one), so its weights are not read back into
    PyTorch and its weight_rel_error is left out."""
    from ai_edge_quantizer import quantizer as quantizer_lib

    from farm_toolchain.quantize import _calibration_data

    static = any((e["op_config"] or {}).get("activation_tensor_config") for e in entries)
    rotated = any(e["algorithm_key"] in ROTATIONS for e in entries)
    calibration = req.get("calibration")
    if static and not calibration:
        out["error"] = "a static treatment needs a calibration set (the request's calibration)"
        return out
    positions = max(32, req["interpreter_positions"])
    ranges = None
    if static:
        qt = quantizer_lib.Quantizer(str(req["float_path"]))
        qt.load_quantization_recipe(_with_offsets(req, entries))
        protocol.progress(f"{t['name']}: calibrating ({calibration.get('steps', 'fresh')} steps)")
        ranges = qt.calibrate(_calibration_data(req["float_path"], calibration))

    def measure(group_entries: list[dict], label: str) -> tuple[dict[str, Any], dict[Any, dict]]:
        q = quantizer_lib.Quantizer(str(req["float_path"]))
        q.load_quantization_recipe(_with_offsets(req, group_entries))
        path = req["work_dir"] / f"interp-{re.sub(r'[^A-Za-z0-9_.-]', '_', label)}.tflite"
        path.write_bytes((q.quantize(ranges) if ranges is not None else q.quantize(enable_progress_report=False)).quantized_model)
        try:
            check = interpreter_check(path, window0, req["prefill_length"], positions, scorer.ref[0], None)
            held = read_back(path, fops_by_key, modules)
        finally:
            path.unlink(missing_ok=True)
        return check, held

    by_regex = {e["regex"]: e for e in entries}
    for n, g in enumerate(sorted(groups.values(), key=_display_order)):
        if g["regex"] not in by_regex or (req["only_groups"] is not None and g["name"] not in req["only_groups"]):
            continue
        t_g = time.monotonic()
        check, held = measure([by_regex[g["regex"]]], g["name"])
        if not check.get("ran"):
            out["not_applicable"][g["name"]] = check.get("why", "the Interpreter could not run it")
            continue
        out["scores"].append({"group": g["name"], "treatment": t["name"], "kl": check["kl_interpreter"],
                              "top1": check["top1_interpreter"], "nll_delta": None, "positions": positions,
                              "bytes": int(round(_group_bytes({g["name"]: g}, held)[g["name"]])),
                              "stored": sorted({held[k]["type"] for k in g["keys"] if k in held}),
                              "weight_rel_error": None if rotated else _rel_error(g["keys"], held),
                              "simulated": "interpreter",
                              "seconds": round(time.monotonic() - t_g, 2)})
        protocol.progress(f"{t['name']}: {n + 1}/{len(groups)} {g['name']}: KL {check['kl_interpreter']:.4g} "
                          "(Interpreter)")
    check, held = measure(entries, "all")
    sizes = _group_bytes(groups, held)
    out["all"] = {"kl": check.get("kl_interpreter"), "top1": check.get("top1_interpreter"), "nll_delta": None,
                  "positions": positions, "bytes": int(round(sum(sizes.values())))}
    out["interpreter_check"] = check
    out["measured_by"] = "interpreter"
    out["seconds"] = round(time.monotonic() - t0, 2)
    return out

"""logits_parity_float / logits_parity: teacher-forced logits parity of a converted model against
its PyTorch source (one measurement, two gates: the float export's .tflite, and the bundle's TFLite
section; each gate sets its label).

Request:
    {"model_dir": HF folder the model was converted from,
     "tflite_path": a .tflite (float export or quantized model)   -- or --
     "bundle_path": a .litertlm (its prefill/decode TFLiteModel section is measured, byte for byte),
     "label": "float" | "quantized",
     optional "prefill_length": 8 (one of the prefill_<N> signatures), "prefill_chunks": 1, "text":
       the teacher-forcing text,
     the settings of farm_common/gates/logits_parity.py (LogitsParityFloat for label "float", LogitsParity
       for "quantized"), each optional with its default there: "positions" (48, compared positions)
       and the thresholds "top1_min", "top5_min", "pearson_min", "kl_max", "kl_ratio_max",
       "max_abs_diff_max", "scores_pearson_min", "scores_max_abs_diff_max",
       "scores_mean_abs_diff_max"; null switches that check off}
Result: the common gate response (farm_toolchain/gates/common.py) plus
    {"mode": "interpreter" | "runtime_scores" | null, "label", "thresholds", "tokens": [ids],
     "model": {"path", "sha256"?, "section"?}}

How the model is driven (mode "interpreter", ai_edge_litert Interpreter, the exact bytes):
- One token sequence: TEXT (multilingual) tokenized by the model's own tokenizer, special tokens
  and the pad id removed (the export derives its valid-token mask from `tokens != pad_token_id`,
  litert_torch/generative/export_hf/core/exportable_module.py:163-171), repeated to
  prefill_chunks * prefill_length + positions ids.
- `prefill_<N>` runs `prefill_chunks` full chunks (no padding: pad tokens would be masked out of
  the linear-attention state and of attention), input_pos = the chunk's absolute positions,
  mask[1,1,N,cache] = 0 where cache position <= query position and -1e38 elsewhere (litert-torch's
  own `create_qwen3_5_attention_mask`, model_ext/qwen3_5/exportable_module.py:31-50); all state
  inputs (kv_cache_k/v full attention, kv_cache_c/r conv / recurrent state) start at zeros and every
  signature's state outputs are fed to the next call. Prefill returns states only (no logits).
- `decode` then runs one position at a time (tokens[1,1], input_pos[1], mask[1,1,1,cache]) over the
  next `positions` tokens, returning logits[1,1,V]: the logits at position p are compared with the
  PyTorch model's logits at p from one float32 forward pass over the same ids. This is the driving
  loop of litert-torch's model_ext/qwen3_5/qwen3_5_raw_tflite_verification.py:231-345
  (run_raw_tflite_pipeline), without its padded partial chunk.

Metrics (over the compared positions):
- top1: fraction of positions where the two argmaxes agree;
- top5: fraction of positions where PyTorch's top-1 token is among the converted model's top 5
  (top5_overlap, the mean |top5 ∩ top5| / 5, is reported, not gated);
- pearson: Pearson correlation of all logits (positions × vocabulary, flattened);
- kl: mean over positions of KL(softmax(PyTorch) ‖ softmax(converted)), in nats, float64;
- kl_ratio: kl / kl_uniform, where kl_uniform is the mean KL(softmax(PyTorch) ‖ uniform) = log V - H:
  the share of the reference's distance from "knowing nothing" that the conversion loses. Scale free:
  a flat random tiny model has kl_uniform ~0.03 nats, a trained model several nats, so a bare KL
  threshold that suits one does not suit the other;
- max_abs_diff / mean_abs_diff: of the logits; pt_logit_absmax gives their scale.

Fused GatedDeltaNet exports carry the custom op `gated_delta_update`, which the plain Interpreter
cannot resolve (litert-lm registers it). A tflite_path with a custom op answers "skipped". A
bundle_path with one is measured through the runtime instead (mode "runtime_scores"): litert_lm
Session.run_text_scoring gives, per target token, its log-likelihood given the prefix (no full
logits, so no top-k or KL); those are compared with PyTorch's log-softmax for the same ids, and the
scores_* thresholds apply. One fresh Engine per measurement: measured on litert-lm 0.18.1, a second
session on the same Engine scored the same text differently (up to 0.014 nats). The runtime's
scores differ from the Interpreter's logits on the same float model by ~0.01 nats (cause not
identified; activation_data_type FLOAT32 changes nothing), so scores_* defaults are looser.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from farm_common.gates.logits_parity import LogitsParity, LogitsParityFloat
from farm_toolchain import protocol
from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput

# Fixed, multilingual, so real tokenizers see several scripts (Latin, CJK, Devanagari, Arabic,
# Cyrillic, digits, code). Teacher forcing does not need the model to "know" it.
TEXT = (
    "The quick brown fox jumps over the lazy dog. Paris is the capital of France, and 17 × 23 = 391.\n"
    "東京は日本の首都です。北京是中国的首都。 नमस्ते, आप कैसे हैं? مرحبا بالعالم. Привет, мир!\n"
    "def add(a, b):\n    return a + b  # 2 + 3 = 5\n"
)

# The thresholds and their defaults per label, and why those numbers: farm_common/gates/
# (LogitsParityFloat for "float", LogitsParity for "quantized"); a threshold set to null is off.
SETTINGS = {"float": LogitsParityFloat, "quantized": LogitsParity}
# threshold key -> (metric, "min" | "max", mode)
CHECKS = {
    "top1_min": ("top1", "min", "interpreter"),
    "top5_min": ("top5", "min", "interpreter"),
    "pearson_min": ("pearson", "min", "interpreter"),
    "kl_max": ("kl", "max", "interpreter"),
    "kl_ratio_max": ("kl_ratio", "max", "interpreter"),
    "max_abs_diff_max": ("max_abs_diff", "max", "interpreter"),
    "scores_pearson_min": ("scores_pearson", "min", "runtime_scores"),
    "scores_max_abs_diff_max": ("scores_max_abs_diff", "max", "runtime_scores"),
    "scores_mean_abs_diff_max": ("scores_mean_abs_diff", "max", "runtime_scores"),
}


# --- request ---------------------------------------------------------------------------------------


def _parse(request: dict[str, Any]) -> dict[str, Any]:
    model_dir = common.model_folder(request)
    has_tflite, has_bundle = bool(request.get("tflite_path")), bool(request.get("bundle_path"))
    if has_tflite == has_bundle:
        raise BadInput("give exactly one of tflite_path (a .tflite) or bundle_path (a .litertlm)")
    if has_tflite:
        target = common.require_file(request, "tflite_path", "the .tflite to measure")
    else:
        target = common.require_file(request, "bundle_path", "the .litertlm to measure")
    label = request.get("label")
    if label not in SETTINGS:
        raise BadInput(f"label must be one of {sorted(SETTINGS)}, got {label!r}")
    settings = common.settings(request, SETTINGS[label])
    text = request.get("text", TEXT)
    if not isinstance(text, str) or not text.strip():
        raise BadInput("text must be a non-empty string")
    return {
        "model_dir": model_dir,
        "tflite": target if has_tflite else None,
        "bundle": target if has_bundle else None,
        "label": label,
        "positions": settings.positions,
        "prefill_length": common.int_arg(request, "prefill_length", 8),
        "prefill_chunks": common.int_arg(request, "prefill_chunks", 1),
        "thresholds": settings.thresholds(),
        "text": text,
    }


# --- helpers ---------------------------------------------------------------------------------------


def custom_ops(tflite: Path) -> list[str]:
    """Custom op codes of a .tflite, read from the flatbuffer through mmap (no full copy in memory)."""
    from ai_edge_litert import schema_py_generated as schema

    with open(tflite, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        try:
            model = schema.Model.GetRootAs(mm, 0)
            names = set()
            for i in range(model.OperatorCodesLength()):
                code = model.OperatorCodes(i)
                custom = code.CustomCode()
                # Only a CUSTOM op code is a custom op: ai-edge-quantizer's inserted ops (a Hadamard
                # rotation's RESHAPE / FULLY_CONNECTED) carry their name in custom_code next to a
                # builtin code, which the Interpreter resolves as the builtin.
                builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
                if custom and builtin == schema.BuiltinOperator.CUSTOM:
                    names.add(custom.decode("utf-8", "replace"))
        except Exception as exc:  # noqa: BLE001 - a flatbuffer that does not parse
            raise BadInput(f"{tflite} is not a readable .tflite flatbuffer: {type(exc).__name__}: {exc}") from exc
    return sorted(names)


def token_sequence(tokenizer: Any, config: Any, text: str, length: int) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    drop = set(getattr(tokenizer, "all_special_ids", []) or [])
    for name in ("pad_token_id",):
        value = getattr(config, name, None)
        if isinstance(value, int):
            drop.add(value)
    ids = [i for i in ids if i not in drop]
    if not ids:
        raise BadInput("the teacher-forcing text tokenizes to no usable ids")
    out: list[int] = []
    while len(out) < length:
        out.extend(ids)
    return out[:length]


def _pt_logits(model: Any, ids: list[int]):
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.long)).logits[0].to(torch.float64).numpy()


def compare_logits(pt: Any, lt: Any) -> dict[str, float]:
    """pt, lt: [positions, vocab] arrays. The metric definitions of the module docstring."""
    import numpy as np

    pt = np.asarray(pt, dtype=np.float64)
    lt = np.asarray(lt, dtype=np.float64)
    n = pt.shape[0]
    pt_top1 = pt.argmax(-1)
    lt_top1 = lt.argmax(-1)
    k = min(5, pt.shape[1])
    pt_top5 = np.argsort(-pt, axis=-1, kind="stable")[:, :k]
    lt_top5 = np.argsort(-lt, axis=-1, kind="stable")[:, :k]
    top5 = np.mean([pt_top1[i] in lt_top5[i] for i in range(n)])
    overlap = np.mean([len(set(pt_top5[i]) & set(lt_top5[i])) / k for i in range(n)])

    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    lp, lq = log_softmax(pt), log_softmax(lt)
    kl = float(np.mean((np.exp(lp) * (lp - lq)).sum(-1)))
    # KL(pt ‖ uniform) = log V - H(pt): how far the reference is from knowing nothing. The ratio makes
    # KL comparable across scales (flat tiny models vs peaked real ones).
    kl_uniform = float(np.mean((np.exp(lp) * (lp + np.log(pt.shape[1]))).sum(-1)))
    a, b = pt.ravel(), lt.ravel()
    pearson = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")
    diff = np.abs(pt - lt)
    return {
        "positions": n,
        "vocab": int(pt.shape[1]),
        "top1": float(np.mean(pt_top1 == lt_top1)),
        "top5": float(top5),
        "top5_overlap": float(overlap),
        "pearson": pearson,
        "kl": max(kl, 0.0),
        "kl_uniform": kl_uniform,
        "kl_ratio": max(kl, 0.0) / kl_uniform if kl_uniform > 0 else float("nan"),
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "pt_logit_absmax": float(np.abs(pt).max()),
    }


def _judge(metrics: dict[str, Any], thresholds: dict[str, float | None], mode: str) -> tuple[str, list[str]]:
    failures = []
    for key, limit in thresholds.items():
        metric, kind, check_mode = CHECKS[key]
        if limit is None or check_mode != mode:
            continue
        value = metrics.get(metric)
        if value is None or value != value:  # NaN: nothing to compare
            failures.append(f"{metric} could not be computed (threshold {key} = {limit:g})")
        elif kind == "min" and value < limit:
            failures.append(f"{metric} {value:.10g} is below {key} {limit:g}")
        elif kind == "max" and value > limit:
            failures.append(f"{metric} {value:.10g} is above {key} {limit:g}")
    return ("fail" if failures else "pass"), failures


# --- interpreter mode ------------------------------------------------------------------------------


def _tflite_run() -> Any:
    """farm_toolchain/tflite_run.py where the runtime runs (this process, or the host of a CPU class)."""
    return common.runtime_module("farm_toolchain.tflite_run")


# --- runtime-scores mode ---------------------------------------------------------------------------


def _run_scores(bundle: Path, tokenizer: Any, model: Any, ids: list[int], prefix_len: int):
    """Per-token log-likelihoods of ids[prefix_len:] given what precedes them, from litert-lm and
    PyTorch. The whole sequence is scored in one run_text_scoring call: measured on litert-lm 0.18.1,
    scoring a target after run_prefill does not condition on the prefill (SmolLM2-135M: the token
    greedy decoding picked next scored -5.3 nats, PyTorch -0.47), while one call over the whole text
    agrees with PyTorch token by token."""
    import numpy as np
    import torch

    notes = []
    with common.fresh_engine(bundle, max_num_tokens=len(ids) + 8) as engine:
        text = tokenizer.decode(ids)
        rt_ids = engine.tokenize(text)
        if rt_ids != ids:
            notes.append("the runtime tokenized the decoded teacher-forcing text to other ids; PyTorch was given "
                         "the runtime's ids")
        rt_prefix, rt_target = rt_ids[:prefix_len], rt_ids[prefix_len:]
        bos = engine.bos_token_id
        pt_ids = ([bos] if bos is not None else []) + rt_ids
        if bos is not None:
            notes.append(f"assumed the runtime scoring prepends its start token {bos}")
        session = engine.create_session(apply_prompt_template=False, sampler_config=common.greedy_sampler())
        try:
            resp = session.run_text_scoring([text], store_token_lengths=True)
        finally:
            session.close()  # before the engine: an engine closed under a live session logs errors
        scores = list(resp.token_scores[0]) if resp.token_scores else []
        lt = np.asarray(scores[-len(rt_target):] if rt_target and len(scores) >= len(rt_target) else scores,
                        dtype=np.float64)
    with torch.no_grad():
        logits = model(torch.tensor([pt_ids], dtype=torch.long)).logits[0].to(torch.float64)
    logp = torch.log_softmax(logits, -1).numpy()
    start = len(pt_ids) - len(rt_target)
    pt = np.asarray([logp[start - 1 + i, t] for i, t in enumerate(rt_target)])
    return pt, lt, rt_prefix, rt_target, notes


def _bundle_cache_length(bundle: Path) -> int | None:
    """The mask's cache dimension of the bundle's prefill signatures, read from the flatbuffer (the
    Interpreter cannot open a model with custom ops)."""
    return common.prefill_plan(bundle).get("cache_length")


# --- command ---------------------------------------------------------------------------------------


def _embedder(bundle: Path | None, scratch: Path, model: Any) -> tuple[Any, str | None]:
    """How token ids become a decoder's `embeddings` input, for a decoder that takes them: a
    bundle's own EMBEDDER section (the bytes it ships), run one id at a time as the runtime runs it;
    for a float export, PyTorch's input embedding, which is what the float embedder part exports
    (litert-torch's LiteRTExportableModuleForEmbedder over model.get_input_embeddings())."""
    import numpy as np

    sections = common.sections(bundle) if bundle is not None else []
    if any(s["type"] == "TFLiteModel" and s["items"].get("model_type") == "tf_lite_embedder" for s in sections):
        part = common.extract_tflite(bundle, scratch / "embedder.tflite", "tf_lite_embedder")

        def embed(ids: list[int]) -> Any:
            return np.asarray(_tflite_run().embed_rows(part["path"], list(ids)))

        return embed, f"embeddings from the bundle's embedder section (sha256 {part['sha256'][:12]})"
    import torch

    def embed_pt(ids: list[int]) -> Any:
        with torch.no_grad():
            return model.get_input_embeddings()(torch.tensor([ids])).reshape(len(ids), -1).float().numpy()

    return embed_pt, "embeddings from PyTorch's input embedding (the float embedder part exports that layer)"


@MEASUREMENTS.register("logits_parity_float")
def measure_float(request: dict[str, Any]) -> dict[str, Any]:
    return _measure({"label": "float", **request})


@MEASUREMENTS.register("logits_parity")
def measure_bundle(request: dict[str, Any]) -> dict[str, Any]:
    return _measure({"label": "quantized", **request})


def _measure(request: dict[str, Any]) -> dict[str, Any]:
    req = _parse(request)
    t0 = time.monotonic()
    label, thresholds = req["label"], req["thresholds"]
    positions, plen, chunks = req["positions"], req["prefill_length"], req["prefill_chunks"]
    base = {"label": label, "thresholds": thresholds}

    with tempfile.TemporaryDirectory(prefix="gate_logits-") as tmp:
        scratch = Path(tmp)
        model_info: dict[str, Any] = {}
        if req["bundle"] is not None:
            section = common.extract_tflite(req["bundle"], scratch / "section.tflite")
            tflite = Path(section["path"])
            model_info = {"path": str(req["bundle"]), "sha256": common.sha256_file(req["bundle"]), "section": section}
        else:
            tflite = req["tflite"]
            model_info = {"path": str(tflite), "sha256": common.sha256_file(tflite)}
        ops = custom_ops(tflite)

        if ops and req["bundle"] is None:
            return common.result(
                "skipped",
                {"seconds": time.monotonic() - t0},
                [f"custom ops in {tflite.name}: {', '.join(ops)}"],
                [
                    f"Logits parity was not measured: the model contains the custom op(s) {', '.join(ops)} "
                    "(the fused GatedDeltaNet export emits gated_delta_update), which the plain ai_edge_litert "
                    "Interpreter cannot resolve; only litert-lm registers it. Measure the bundle instead "
                    "(bundle_path): litert-lm's run_text_scoring gives per-token log-likelihoods, not full logits.",
                ],
                mode=None,
                model=model_info,
                **base,
            )

        total = chunks * plen + positions
        opened = None if ops else _tflite_run().open_decoder(str(tflite), plen, total)
        tokenizer, model = common.load_reference(req["model_dir"], protocol.progress)
        ids = token_sequence(tokenizer, model.config, req["text"], total)

        if ops:  # a bundle whose model the Interpreter cannot run: score through the runtime
            import numpy as np

            cache_len = _bundle_cache_length(req["bundle"])
            if cache_len is not None and total > cache_len:
                raise BadInput(
                    f"prefill_chunks * prefill_length + positions = {total} exceeds the model's cache length {cache_len}"
                )

            protocol.progress(f"custom ops {ops}: teacher-forced scoring through litert-lm")
            pt, lt, rt_prefix, rt_target, notes = _run_scores(
                req["bundle"], tokenizer, model, ids, chunks * plen
            )
            if len(lt) != len(pt):
                metrics = {"positions": len(pt), "scored_positions": len(lt), "seconds": time.monotonic() - t0}
                return common.result(
                    "fail",
                    metrics,
                    [f"prefix ids: {rt_prefix}", f"target ids: {rt_target}", f"runtime scores: {lt.tolist()}"],
                    [f"litert-lm scored {len(lt)} target tokens, PyTorch {len(pt)}: the runtime tokenized the target differently"]
                    + notes,
                    mode="runtime_scores",
                    tokens=rt_prefix + rt_target,
                    model=model_info,
                    **base,
                )
            diff = np.abs(pt - lt)
            metrics = {
                "positions": len(pt),
                "scores_pearson": float(np.corrcoef(pt, lt)[0, 1]) if pt.std() > 0 and lt.std() > 0 else float("nan"),
                "scores_max_abs_diff": float(diff.max()),
                "scores_mean_abs_diff": float(diff.mean()),
                "pt_logprob_sum": float(pt.sum()),
                "lt_logprob_sum": float(lt.sum()),
                "seconds": time.monotonic() - t0,
            }
            status, failures = _judge(metrics, thresholds, "runtime_scores")
            worst = int(diff.argmax())
            evidence = [
                f"prefix ids ({len(rt_prefix)}): {rt_prefix}",
                f"target ids ({len(rt_target)}): {rt_target}",
                f"pytorch log-likelihoods: {[round(x, 5) for x in pt.tolist()]}",
                f"litert-lm log-likelihoods: {[round(x, 5) for x in lt.tolist()]}",
                f"worst target token #{worst} (id {rt_target[worst]}): pytorch {pt[worst]:.6f}, litert-lm {lt[worst]:.6f}",
            ]
            findings = [
                f"The model contains custom op(s) {', '.join(ops)} that the plain Interpreter cannot run, so it was "
                "measured through litert-lm's Session.run_text_scoring: per-token log-likelihoods of the target "
                "tokens (no full logits, so no top-k or KL)."
            ] + notes + failures
            return common.result(
                status, metrics, evidence, findings,
                mode="runtime_scores", tokens=rt_prefix + rt_target, model=model_info, **base,
            )

        protocol.progress(f"teacher forcing {total} ids: prefill_{plen} × {chunks}, then {positions} decode steps")
        t_lt = time.monotonic()
        run = _tflite_run()
        takes_embeddings = run.takes_embeddings(opened)
        embed, embed_note = _embedder(req["bundle"], scratch, model) if takes_embeddings else (None, None)
        if embed_note:
            protocol.progress(embed_note)
        lt = run.run_decoder(opened, ids, plen, chunks, embed(ids) if embed is not None else None)
        cache_len = opened[3]
        lt_seconds = time.monotonic() - t_lt
        t_pt = time.monotonic()
        pt_all = _pt_logits(model, ids)
        pt_seconds = time.monotonic() - t_pt
        first = chunks * plen
        pt = pt_all[first:total]
        metrics = compare_logits(pt, lt)
        metrics.update(
            {
                "prefill_length": plen,
                "prefill_chunks": chunks,
                "cache_length": cache_len,
                "litert_seconds": lt_seconds,
                "pytorch_seconds": pt_seconds,
                "seconds": time.monotonic() - t0,
            }
        )
        status, failures = _judge(metrics, thresholds, "interpreter")

        import numpy as np

        pt_top, lt_top = pt.argmax(-1), lt.argmax(-1)
        evidence = [
            *([embed_note] if embed_note else []),
            f"tokens ({total}): {ids}",
            f"prefill_{plen} × {chunks} over positions 0-{first - 1}; decode over positions {first}-{total - 1}",
            f"pytorch top-1 per position: {pt_top.tolist()}",
            f"litert top-1 per position:  {lt_top.tolist()}",
        ]
        mismatched = [i for i in range(len(pt_top)) if pt_top[i] != lt_top[i]]
        for i in mismatched[:8]:
            evidence.append(
                f"position {first + i}: pytorch top-1 {int(pt_top[i])} ({pt[i, pt_top[i]]:.6f}), "
                f"litert top-1 {int(lt_top[i])} ({lt[i, lt_top[i]]:.6f}; pytorch's token there {lt[i, pt_top[i]]:.6f})"
            )
        worst = np.unravel_index(np.abs(pt - lt).argmax(), pt.shape)
        evidence.append(
            f"largest |diff| at position {first + int(worst[0])}, token {int(worst[1])}: "
            f"pytorch {pt[worst]:.8f}, litert {lt[worst]:.8f}"
        )
        findings = list(failures)
        if status == "pass":
            findings.append(
                f"Teacher-forced logits parity vs PyTorch ({label}) over {metrics['positions']} positions: "
                f"top-1 {metrics['top1']:.1%}, top-5 {metrics['top5']:.1%}, Pearson {metrics['pearson']:.8f}, "
                f"KL {metrics['kl']:.2e}, max |diff| {metrics['max_abs_diff']:.2e}."
            )
        return common.result(
            status, metrics, evidence, findings, mode="interpreter", tokens=ids, model=model_info, **base
        )

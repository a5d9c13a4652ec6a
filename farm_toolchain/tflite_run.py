"""A TFLite graph through the ai_edge_litert Interpreter, the exact bytes, driven as litert-lm drives
them: a decoder's prefill chunks then one decode step per id (states carried), an embedder one id at
a time, a vision encoder on pixels.

numpy and ai_edge_litert only (no torch, no pydantic): the same functions run in the toolchain
process and, under another CPU class, inside the runtime host (farm_toolchain/runtime_host.py: the
arm64 root carries numpy and ai_edge_litert, nothing else), called whole through
`cpu_class.runtime_module("farm_toolchain.tflite_run")`, so the states never cross the wire — only
the ids in and the logits out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from farm_toolchain import threads
from farm_toolchain.protocol import BadInput

MASK_MIN = -1e38  # litert-torch's create_qwen3_5_attention_mask value for masked positions


def mask(np: Any, positions: Any, cache_len: int, dtype: Any) -> Any:
    cache = np.arange(cache_len).reshape(1, 1, 1, cache_len)
    q = np.asarray(positions).reshape(1, 1, -1, 1)
    return np.where(cache <= q, 0.0, MASK_MIN).astype(dtype)


def open_decoder(tflite: Path | str, prefill_length: int, total: int):
    """The Interpreter and its prefill/decode runners, checked against the request (BadInput) before
    the PyTorch reference is loaded: (interpreter, prefill, decode, cache_len)."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(tflite), num_threads=threads.budget())
    sigs = interp.get_signature_list()
    prefill_name = f"prefill_{prefill_length}"
    if prefill_name not in sigs or "decode" not in sigs:
        lengths = sorted(int(s.split("_", 1)[1]) for s in sigs if s.startswith("prefill_") and s.split("_", 1)[1].isdigit())
        raise BadInput(
            f"{tflite} has signatures {sorted(sigs)}: prefill_length must be one of {lengths} "
            "and a 'decode' signature is needed"
        )
    prefill = interp.get_signature_runner(prefill_name)
    decode = interp.get_signature_runner("decode")
    p_in, d_in = prefill.get_input_details(), decode.get_input_details()
    ids_input = "embeddings" if "tokens" not in d_in and "embeddings" in d_in and "embeddings" in p_in else "tokens"
    for name, need in ((ids_input, True), ("input_pos", True), ("mask", False)):
        if need and (name not in p_in or name not in d_in):
            raise BadInput(f"{tflite}: signatures lack a {name!r} input (inputs: {sorted(d_in)}); not a text prefill/decode model")
    if "logits" not in decode.get_output_details():
        raise BadInput(f"{tflite}: the decode signature returns no 'logits'")
    cache_len = int(d_in["mask"]["shape"][-1]) if "mask" in d_in else None
    if cache_len is not None and total > cache_len:
        raise BadInput(
            f"prefill_chunks * prefill_length + positions = {total} exceeds the model's cache length {cache_len}"
        )
    return [interp, prefill, decode, cache_len]


def takes_embeddings(opened: Any) -> bool:
    return "tokens" not in opened[2].get_input_details()


def run_decoder(opened: Any, ids: list[int], prefill_length: int, chunks: int, rows: Any = None) -> Any:
    """Logits [len(ids) - chunks*prefill_length, vocab] from prefill chunks then one decode per id.
    A decoder that takes `embeddings` (an image model's: its embedder is its own graph) is fed
    `rows` ([len(ids), hidden] float32, one per id) in place of the ids."""
    import numpy as np

    _interp, prefill, decode, cache_len = opened
    p_in, d_in = prefill.get_input_details(), decode.get_input_details()
    state_names = sorted(n for n in d_in if n not in ("tokens", "embeddings", "input_pos", "mask"))
    total = len(ids)
    states = {n: np.zeros(p_in[n]["shape"], dtype=p_in[n]["dtype"]) for n in state_names}
    rows_of = None
    if "tokens" not in d_in:
        if rows is None:
            raise BadInput("the decoder takes embeddings and no embedder was given")
        rows_of = np.asarray(rows, dtype=np.float32)

    def feed(runner_in, tokens, pos):
        args = dict(states)
        if rows_of is not None:
            args["embeddings"] = rows_of[pos[0]:pos[-1] + 1][None].astype(runner_in["embeddings"]["dtype"])
        else:
            args["tokens"] = np.asarray([tokens], dtype=runner_in["tokens"]["dtype"])
        args["input_pos"] = np.asarray(pos, dtype=runner_in["input_pos"]["dtype"])
        if "mask" in runner_in:
            args["mask"] = mask(np, pos, cache_len, runner_in["mask"]["dtype"])
        return args

    for c in range(chunks):
        lo, hi = c * prefill_length, (c + 1) * prefill_length
        out = prefill(**feed(p_in, ids[lo:hi], list(range(lo, hi))))
        states = {n: np.array(out[n]) for n in state_names}
    out_rows = []
    for p in range(chunks * prefill_length, total):
        out = decode(**feed(d_in, [ids[p]], [p]))
        out_rows.append(np.array(out["logits"], dtype=np.float64).reshape(-1))
        states = {n: np.array(out[n]) for n in state_names}
    return np.stack(out_rows)


def embed_rows(embedder: Path | str, ids: list[int]) -> Any:
    """An embedder graph's rows for `ids` ([len(ids), hidden]), one id at a time as the runtime runs it."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(embedder)).get_signature_runner()
    dtype = runner.get_input_details()["token_ids"]["dtype"]
    return np.concatenate([np.asarray(runner(token_ids=np.asarray([[i]], dtype=dtype))["embeddings"]).reshape(1, -1)
                           for i in ids])


def run_encoder(encoder: Path | str, pixels: list[Any]) -> list[Any]:
    """A vision encoder's output for each pixel array (one Interpreter for them all)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(encoder)).get_signature_runner()
    name = next(iter(runner.get_input_details()))
    return [np.asarray(next(iter(runner(**{name: p}).values()))) for p in pixels]

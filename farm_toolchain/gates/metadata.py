"""metadata: the bundle's metadata sections say what the runtime needs to run the model right.

Request:
    {"bundle_path": the .litertlm,
     "tokenizer_json": the source repository's tokenizer.json (null: that comparison is skipped),
     "end_of_turn": the chat end-of-turn token, e.g. "<|im_end|>" (null: that check is skipped),
     "recurrent_state": true for families with per-layer recurrent state (Qwen3.5), default false,
     optional "llm_model_type": the LlmModelType the family needs (null: that check is skipped),
     optional "reference_stop_ids": the source's end-of-sequence ids (as the source stage recorded them)}
Result (the common gate response): status "pass" iff every check that applies holds; evidence has
one line per check ("PASS …", "FAIL …", "SKIP …").

Checks:
- llm_metadata: the LlmMetadataProto section is there and parses (litert_lm_builder's
  runtime/proto/llm_metadata_pb2);
- stop_tokens: one stop token is the end-of-turn token, as its ids (token_ids {ids: …}, ids taken
  from the tokenizer) or as that exact string (token_str); a stop string that merely contains it
  (litert-torch adds "<|im_end|>\\n", ".<|im_end|>\\n" …) does not count;
- blank_stops: no stop token is only whitespace (a newline token declared as a stop token ends
  every reply at its first line break: LiteRT-LM #950), ids decoded with the bundle's tokenizer;
- model_type: the LlmMetadataProto's llm_model_type is the family's (a gemma4 bundle written as
  generic_model is rejected by the runtime: litert-torch #1005);
- source_stops: every end-of-sequence id of the source (generation_config.json) is a stop token of
  the bundle (as an id, or as the exact text of that special token);
- executor_metadata (recurrent_state only): the ExecutorMetadataProto section is there and lists
  state buffers, and every buffer's prefill/decode input name is an input of every prefill_<N> /
  the decode signature of the bundle's TFLite section (the runtime binds states by these names);
- tokenizer_section: the HF_Tokenizer_Zlib section (8-byte little-endian size + zlib) decompresses to
  exactly the source tokenizer.json bytes.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput


def _token_union(t) -> str:
    if t.HasField("token_ids"):
        return f"ids {list(t.token_ids.ids)}"
    return f"str {t.token_str!r}"


@MEASUREMENTS.register("metadata")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    bundle = common.require_file(request, "bundle_path")
    tokenizer_json = common.optional_file(request, "tokenizer_json")
    end_of_turn = request.get("end_of_turn")
    if end_of_turn is not None and (not isinstance(end_of_turn, str) or not end_of_turn):
        raise BadInput(f"end_of_turn must be a non-empty string or null, got {end_of_turn!r}")
    recurrent = common.bool_arg(request, "recurrent_state", False)
    model_type = request.get("llm_model_type")
    if model_type is not None and (not isinstance(model_type, str) or not model_type):
        raise BadInput(f"llm_model_type must be a non-empty string or null, got {model_type!r}")
    source_stops = common.stop_ids_arg(request) if request.get("reference_stop_ids") is not None else None

    secs = common.sections(bundle)
    checks: list[tuple[str, str, str]] = []  # (name, PASS | FAIL | SKIP, detail)
    metrics: dict[str, Any] = {"sections": len(secs)}
    findings: list[str] = []

    # --- LLM metadata ---
    meta = None
    try:
        meta = common.llm_metadata(bundle, secs)
    except Exception as exc:  # noqa: BLE001 - a section that does not parse is a failed check
        checks.append(("llm_metadata", "FAIL", f"LlmMetadataProto does not parse: {exc}"))
    else:
        if meta is None:
            checks.append(("llm_metadata", "FAIL", "no LlmMetadataProto section"))
        else:
            checks.append(
                ("llm_metadata", "PASS", f"LlmMetadataProto parses: {len(meta.stop_tokens)} stop tokens, "
                 f"start token {_token_union(meta.start_token) if meta.HasField('start_token') else 'none'}, "
                 f"max_num_tokens {meta.max_num_tokens}, "
                 f"chat template {len(meta.jinja_prompt_template)} chars")
            )
            metrics["stop_tokens"] = len(meta.stop_tokens)

    # --- the tokenizer section (also gives the ids for the stop-token check) ---
    section_tokenizer: bytes | None = None
    try:
        section_tokenizer = common.hf_tokenizer_json(bundle, secs)
    except ValueError as exc:
        checks.append(("tokenizer_section", "FAIL", str(exc)))
    else:
        if section_tokenizer is None:
            kinds = sorted({s["type"] for s in secs})
            checks.append(("tokenizer_section", "FAIL" if tokenizer_json else "SKIP",
                           f"no HF_Tokenizer_Zlib section (sections: {', '.join(kinds)})"))
        elif tokenizer_json is None:
            checks.append(("tokenizer_section", "SKIP",
                           f"HF_Tokenizer_Zlib decompresses to {len(section_tokenizer)} bytes (sha256 "
                           f"{hashlib.sha256(section_tokenizer).hexdigest()[:16]}…); no tokenizer_json to compare"))
        else:
            source = tokenizer_json.read_bytes()
            sec_sha, src_sha = (hashlib.sha256(b).hexdigest() for b in (section_tokenizer, source))
            metrics["tokenizer_section_bytes"] = len(section_tokenizer)
            metrics["tokenizer_json_bytes"] = len(source)
            if section_tokenizer == source:
                checks.append(("tokenizer_section", "PASS",
                               f"HF_Tokenizer_Zlib decompresses to the source tokenizer.json byte for byte "
                               f"({len(source)} bytes, sha256 {src_sha[:16]}…)"))
            else:
                first = next((i for i, (a, b) in enumerate(zip(section_tokenizer, source)) if a != b),
                             min(len(section_tokenizer), len(source)))
                checks.append(("tokenizer_section", "FAIL",
                               f"HF_Tokenizer_Zlib holds {len(section_tokenizer)} bytes (sha256 {sec_sha[:16]}…), "
                               f"the source tokenizer.json {len(source)} bytes (sha256 {src_sha[:16]}…); "
                               f"first difference at byte {first}"))
                findings.append(
                    f"The bundle's tokenizer section is not the source repository's tokenizer.json "
                    f"({len(section_tokenizer)} bytes, sha256 {sec_sha[:16]}…, against {len(source)} bytes, "
                    f"sha256 {src_sha[:16]}…)."
                )

    # --- stop tokens include the end-of-turn token ---
    if end_of_turn is None:
        checks.append(("stop_tokens", "SKIP", "no end_of_turn given"))
    elif meta is None:
        checks.append(("stop_tokens", "FAIL", "no LLM metadata to read stop tokens from"))
    else:
        eot_ids = _end_of_turn_ids(end_of_turn, tokenizer_json, section_tokenizer)
        matched = []
        for t in meta.stop_tokens:
            if t.HasField("token_ids") and eot_ids is not None and list(t.token_ids.ids) == eot_ids:
                matched.append(_token_union(t))
            elif not t.HasField("token_ids") and t.token_str == end_of_turn:
                matched.append(_token_union(t))
        listed = ", ".join(_token_union(t) for t in meta.stop_tokens)
        if matched:
            checks.append(("stop_tokens", "PASS",
                           f"stop tokens include the end-of-turn token {end_of_turn!r} (ids {eot_ids}) as "
                           f"{' and '.join(matched)}; all: {listed}"))
        else:
            checks.append(("stop_tokens", "FAIL",
                           f"no stop token is the end-of-turn token {end_of_turn!r} (ids {eot_ids}); "
                           f"stop tokens: {listed or 'none'}"))
            findings.append(
                f"The bundle's stop tokens do not include the chat end-of-turn token {end_of_turn}: "
                f"generation would run past the end of the reply."
            )

    # --- no stop token is only whitespace (LiteRT-LM #950) ---
    if meta is None:
        checks.append(("blank_stops", "FAIL", "no LLM metadata to read stop tokens from"))
    else:
        blank = _blank_stops(meta.stop_tokens, tokenizer_json, section_tokenizer)
        if blank:
            checks.append(("blank_stops", "FAIL", f"stop token(s) {', '.join(blank)} are only whitespace"))
            findings.append(f"The bundle stops on {', '.join(blank)}, which is only whitespace: every reply ends at "
                            "its first line break (LiteRT-LM #950).")
        else:
            checks.append(("blank_stops", "PASS", f"none of the {len(meta.stop_tokens)} stop tokens is only whitespace"))

    # --- the model type the runtime dispatches on ---
    if model_type is None:
        checks.append(("model_type", "SKIP", "no llm_model_type given"))
    elif meta is None:
        checks.append(("model_type", "FAIL", "no LLM metadata to read the model type from"))
    else:
        written = meta.llm_model_type.WhichOneof("model_type")
        if written == model_type:
            checks.append(("model_type", "PASS", f"llm_model_type is {written}, the family's"))
        else:
            checks.append(("model_type", "FAIL", f"llm_model_type is {written or 'unset'}, the family needs {model_type}"))
            findings.append(f"The bundle's LLM metadata says model type {written or 'unset'}, not {model_type}: the "
                            "runtime picks the model's prompt and token handling by it (litert-torch #1005).")

    # --- every end-of-sequence id of the source is a stop token (else replies run past the source's end) ---
    if source_stops is None:
        checks.append(("source_stops", "SKIP", "no reference_stop_ids given"))
    elif meta is None:
        checks.append(("source_stops", "FAIL", "no LLM metadata to read stop tokens from"))
    else:
        single = {t.token_ids.ids[0] for t in meta.stop_tokens if t.HasField("token_ids") and len(t.token_ids.ids) == 1}
        added = _added_tokens(tokenizer_json, section_tokenizer)
        single |= {added[t.token_str] for t in meta.stop_tokens
                   if not t.HasField("token_ids") and t.token_str in added}
        missing = [i for i in source_stops if i not in single]
        if missing:
            checks.append(("source_stops", "FAIL",
                           f"the source's end-of-sequence ids {source_stops} are not all stop tokens: {missing} "
                           f"missing (stop ids {sorted(single)})"))
            findings.append(f"The bundle does not stop on the source's end-of-sequence token id(s) {missing}.")
        else:
            checks.append(("source_stops", "PASS",
                           f"the source's end-of-sequence ids {source_stops} are all stop tokens"))

    # --- executor metadata for recurrent-state families ---
    exec_meta = None
    try:
        exec_meta = common.executor_metadata(bundle, secs)
    except Exception as exc:  # noqa: BLE001
        checks.append(("executor_metadata", "FAIL", f"ExecutorMetadataProto does not parse: {exc}"))
    else:
        buffers = list(exec_meta.llm_executor_metadata.state_buffers) if exec_meta is not None else []
        metrics["state_buffers"] = len(buffers)
        metrics["has_executor_metadata"] = exec_meta is not None
        if not recurrent:
            checks.append(("executor_metadata", "SKIP",
                           f"recurrent_state false; ExecutorMetadataProto "
                           f"{'present with ' + str(len(buffers)) + ' state buffers' if exec_meta else 'absent'}"))
        elif exec_meta is None:
            checks.append(("executor_metadata", "FAIL",
                           "no ExecutorMetadataProto section: litert-lm cannot bind this family's recurrent "
                           "state buffers"))
            findings.append("The bundle lacks the executor metadata that binds the recurrent state buffers.")
        elif not buffers:
            checks.append(("executor_metadata", "FAIL", "ExecutorMetadataProto lists no state buffers"))
        else:
            checks.append(_check_buffers(bundle, secs, buffers))

    failed = [c for c in checks if c[1] == "FAIL"]
    applied = [c for c in checks if c[1] != "SKIP"]
    metrics.update(
        checks_total=len(checks),
        checks_passed=sum(c[1] == "PASS" for c in checks),
        checks_failed=len(failed),
        checks_skipped=len(checks) - len(applied),
        seconds=round(time.monotonic() - started, 3),
    )
    evidence = [f"{status} {name}: {detail}" for name, status, detail in checks]
    status = "fail" if failed else "pass"
    if not failed:
        held = {name for name, st, _ in checks if st == "PASS"}
        parts = []
        if "tokenizer_section" in held:
            parts.append(f"its tokenizer section is the source repository's tokenizer.json byte for byte "
                         f"({metrics['tokenizer_json_bytes']} bytes)")
        if "stop_tokens" in held:
            parts.append(f"its stop tokens include the end-of-turn token {end_of_turn}")
        if "executor_metadata" in held:
            parts.append(f"its executor metadata binds {metrics['state_buffers']} state buffers")
        if parts:
            findings.append("Bundle metadata: " + "; ".join(parts) + ".")
    return common.result(status, metrics, evidence, findings=findings)


def _added_tokens(tokenizer_json: Path | None, section: bytes | None) -> dict[str, int]:
    """{content: id} of the tokenizer's added (special) tokens (parsed once: a real tokenizer.json is
    several MB)."""
    raw = tokenizer_json.read_bytes() if tokenizer_json is not None else section
    try:
        data = json.loads(raw) if raw is not None else {}
    except ValueError:
        return {}
    return {a["content"]: int(a["id"]) for a in data.get("added_tokens", []) if "content" in a and "id" in a}


def _blank_stops(stops, tokenizer_json: Path | None, section: bytes | None) -> list[str]:
    """The stop tokens that are only whitespace (strings as written, ids as the tokenizer decodes
    them), each as the evidence shows it."""
    out = []
    decode = None
    raw = tokenizer_json.read_bytes() if tokenizer_json is not None else section
    if raw is not None:
        try:
            from tokenizers import Tokenizer

            decode = Tokenizer.from_str(raw.decode("utf-8")).decode
        except Exception:  # noqa: BLE001 - ids then go unjudged; the tokenizer_section check says why
            decode = None
    for t in stops:
        if t.HasField("token_ids"):
            if decode is None:
                continue
            text = decode(list(t.token_ids.ids), skip_special_tokens=False)
            if text and not text.strip():
                out.append(f"ids {list(t.token_ids.ids)} ({text!r})")
        elif t.token_str and not t.token_str.strip():
            out.append(f"str {t.token_str!r}")
    return out


def _end_of_turn_ids(token: str, tokenizer_json: Path | None, section: bytes | None) -> list[int] | None:
    """The ids of the end-of-turn token: an added token's id, else the tokenizer's encoding of it."""
    raw = tokenizer_json.read_bytes() if tokenizer_json is not None else section
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    for added in data.get("added_tokens", []):
        if added.get("content") == token:
            return [int(added["id"])]
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(raw.decode("utf-8")).encode(token, add_special_tokens=False).ids
    except Exception:  # noqa: BLE001
        return None


def _check_buffers(bundle: Path, secs: list[dict[str, Any]], buffers: list) -> tuple[str, str, str]:
    from litert_lm_builder.runtime.proto import executor_metadata_pb2

    sigs = common.tflite_signatures(bundle, secs)
    prefills = [k for k in sigs if k.startswith("prefill_")]
    problems = []
    for b in buffers:
        for key in prefills:
            if b.prefill_input_name not in sigs[key]["inputs"]:
                problems.append(f"{b.prefill_input_name!r} is not an input of {key}")
            if b.prefill_output_name and b.prefill_output_name not in sigs[key]["outputs"]:
                problems.append(f"{b.prefill_output_name!r} is not an output of {key}")
        if "decode" in sigs:
            if b.decode_input_name not in sigs["decode"]["inputs"]:
                problems.append(f"{b.decode_input_name!r} is not an input of decode")
            if b.decode_output_name and b.decode_output_name not in sigs["decode"]["outputs"]:
                problems.append(f"{b.decode_output_name!r} is not an output of decode")
    kinds: dict[str, int] = {}
    for b in buffers:
        field = executor_metadata_pb2.StateBuffer.DESCRIPTOR.fields_by_name["type"]
        value = field.enum_type.values_by_number.get(b.type) if field.enum_type else None
        name = value.name if value is not None else str(b.type)
        kinds[name] = kinds.get(name, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
    if problems:
        return ("executor_metadata", "FAIL",
                f"ExecutorMetadataProto lists {len(buffers)} state buffers ({summary}) but "
                + "; ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""))
    return ("executor_metadata", "PASS",
            f"ExecutorMetadataProto lists {len(buffers)} state buffers ({summary}), each an input and "
            f"output of {', '.join(sorted(prefills))} and decode")

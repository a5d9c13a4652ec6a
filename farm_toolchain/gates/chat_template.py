"""chat_template: the bundle's chat template, rendered by the runtime, equals transformers'
`apply_chat_template` with the source tokenizer (the recorded reference).

Request:
    {"bundle_path", "model_dir" (the recorded reference: its tokenizer and chat template),
     optional "conversations": [{"name", "messages": [...], "reference_messages": [...]?}] (default:
       DEFAULT_CONVERSATIONS)}

The runtime's render: `Engine.create_conversation(messages=all but the last message)` then
`Conversation.render_message_to_string(last message)`: with nothing prefilled yet this is the whole
conversation as the runtime will prefill it, generation prompt included (measured on litert-lm
0.18.1: on the tiny Qwen3.5's ChatML template it equals apply_chat_template byte for byte on all
three default conversations). The runtime hands message content to the template as content parts
([{"type": "text", "text": …}]) however it was given; a template that only takes strings fails
here ("+ operator on unsupported types string and sequence"), so the third conversation passes parts
explicitly and the reference renders its string form (what a transformers user passes).

The reference: `tokenizer.apply_chat_template(reference messages, tokenize=False,
add_generation_prompt=True)` with the source folder's tokenizer. When it starts with the bundle's
start token text and the runtime's render does not, that prefix is dropped before comparing: the
runtime renders with an empty bos_token and adds the start token as a token at prefill.

Status "pass" iff every conversation renders and the two renders are identical; a difference fails
with the first differing characters of both as evidence.
"""

from __future__ import annotations

import time
from typing import Any

from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput

DEFAULT_CONVERSATIONS: list[dict[str, Any]] = [
    {"name": "system + user", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"}]},
    {"name": "three turns", "messages": [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "5"},
        {"role": "user", "content": "Thanks!"}]},
    {"name": "content parts", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Name a"}, {"type": "text", "text": " primary color."}]}],
     "reference_messages": [{"role": "user", "content": "Name a primary color."}]},
]


def _conversations(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return DEFAULT_CONVERSATIONS
    if not isinstance(raw, list) or not raw:
        raise BadInput("conversations must be a non-empty list of {name, messages}")
    for i, c in enumerate(raw):
        msgs = c.get("messages") if isinstance(c, dict) else None
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) and m.get("role") for m in msgs):
            raise BadInput(f"conversations[{i}].messages must be a non-empty list of {{role, content}}")
        if msgs[-1]["role"] != "user":
            raise BadInput(f"conversations[{i}] must end with a user message (its render is what gets prefilled)")
    return raw


def first_difference(a: str, b: str) -> int | None:
    """Index of the first differing character, or None when the strings are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _start_text(meta: Any, tokenizer: Any) -> str:
    if meta is None or not meta.HasField("start_token"):
        return ""
    t = meta.start_token
    if t.HasField("token_ids"):
        return tokenizer.decode(list(t.token_ids.ids), skip_special_tokens=False)
    return t.token_str


@MEASUREMENTS.register("chat_template")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    bundle = common.require_file(request, "bundle_path")
    model_dir = common.model_folder(request)
    conversations = _conversations(request.get("conversations"))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    if not getattr(tokenizer, "chat_template", None):
        raise BadInput(f"{model_dir} has no chat template to compare the bundle's with")
    meta = common.llm_metadata(bundle)
    if meta is None or not meta.jinja_prompt_template:
        return common.result("fail", {"conversations": len(conversations), "identical": 0},
                             ["the bundle's LLM metadata has no chat template"],
                             ["The bundle carries no chat template: the runtime cannot render conversations."])
    start = _start_text(meta, tokenizer)

    rows, evidence = [], []
    for conv in conversations:
        msgs = conv["messages"]
        reference = tokenizer.apply_chat_template(conv.get("reference_messages") or msgs, tokenize=False,
                                                  add_generation_prompt=True)
        runtime, error = None, None
        with common.fresh_engine(bundle) as engine, common.native_errors() as native:
            try:
                c = engine.create_conversation(messages=msgs[:-1] or None)
                try:
                    runtime = c.render_message_to_string(msgs[-1])
                finally:
                    c.close()
            except Exception as exc:  # noqa: BLE001 - a template the runtime cannot render is the finding
                error = f"{type(exc).__name__}: {exc}"
        if error is None and not runtime:
            error = "the runtime rendered an empty string"
        if error is not None:
            reason = common.first_native_error(native)
            error += f" (runtime: {reason})" if reason else ""
        compared = reference
        if start and reference.startswith(start) and runtime is not None and not runtime.startswith(start):
            compared = reference[len(start):]
        at = None if error else first_difference(runtime, compared)
        same = error is None and at is None
        rows.append({"name": conv.get("name"), "reference": reference, "runtime": runtime, "error": error,
                     "identical": same, "first_difference": at,
                     "start_token_dropped": compared is not reference})
        if error:
            evidence.append(f"{conv.get('name')}: the runtime could not render it: {error}; transformers renders "
                            f"{common.short(reference, 300)!r}")
        elif same:
            evidence.append(f"{conv.get('name')}: identical ({len(runtime)} chars): {common.short(runtime, 300)!r}")
        else:
            lo = max(0, at - 40)
            evidence.append(
                f"{conv.get('name')}: renders differ at character {at}: runtime {runtime[lo:at + 60]!r} | "
                f"transformers {compared[lo:at + 60]!r}"
            )
    identical = sum(r["identical"] for r in rows)
    ok = identical == len(rows)
    findings = [
        f"The bundle's chat template, rendered by litert-lm {common.runtime_info().get('version')}, equals "
        f"transformers' apply_chat_template with the source tokenizer on {identical} of {len(rows)} conversations"
        + ("." if ok else f"; it differs on {[r['name'] for r in rows if not r['identical']]}.")
    ]
    metrics = {"conversations": len(rows), "identical": identical,
               "render_errors": sum(r["error"] is not None for r in rows),
               "seconds": round(time.monotonic() - started, 3)}
    return common.result("pass" if ok else "fail", metrics, evidence, findings, conversations=rows)

"""text_turn_equality: text-only turns on an image bundle against the text build's.

Request:
    {"bundle_path": the image bundle, "text_bundle_path": the text build of the same source and
     recipe, the settings of farm_common/gates/text_turn_equality.py TextTurnEquality: "prompts", "max_tokens"}

Each prompt is asked of each bundle on its own fresh Engine (CPU), one Conversation, greedy (the
path `litert-lm run` takes, each bundle's own chat template): the image bundle's decoder takes the
embeddings its embedder section looks up, the text build's looks its token ids up itself, so the
replies are equal only if the two paths compute the same thing. Pass iff every reply is the same.
"""

from __future__ import annotations

from typing import Any

from farm_common.gates.text_turn_equality import TextTurnEquality
from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS


@MEASUREMENTS.register("text_turn_equality")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    image = common.require_file(request, "bundle_path", "the image bundle")
    text = common.require_file(request, "text_bundle_path", "the text build of the same source and recipe")
    p = common.settings(request, TextTurnEquality)
    replies: dict[str, list[dict[str, Any]]] = {}
    for key, path in (("image", image), ("text", text)):
        replies[key] = []
        for prompt in p.prompts:
            with common.fresh_engine(path) as engine:
                replies[key].append(common.ask(engine, prompt, p.max_tokens))
    same = 0
    evidence = [f"text build sha256 {common.sha256_file(text)[:12]}"]
    for prompt, a, b in zip(p.prompts, replies["image"], replies["text"]):
        ok = a["error"] is None and b["error"] is None and a["reply"] == b["reply"]
        same += ok
        evidence.append(f"{prompt!r}: image bundle {common.short(a['reply'], 80)!r}"
                        f"{' (error: ' + a['error'] + ')' if a['error'] else ''} | text build "
                        f"{common.short(b['reply'], 80)!r}{' (error: ' + b['error'] + ')' if b['error'] else ''}"
                        f" -> {'same' if ok else 'DIFFERENT'}")
    findings = [] if same == len(p.prompts) else [
        f"{len(p.prompts) - same} of {len(p.prompts)} text turns on the image bundle differ from the text build's"]
    return common.result("fail" if findings else "pass", {"prompts": len(p.prompts), "same": same},
                         evidence, findings)

"""image_turn_parity: image turns through the runtime against PyTorch through the source's processor.

Request:
    {"bundle_path": .litertlm with a vision encoder, "model_dir": the source folder (the reference),
     "reference_stop_ids": the source's end-of-sequence ids,
     the settings of farm_common/gates/image_turn_parity.py ImageTurnParity: "prompt", "max_tokens",
     "min_exact_fraction"}

The images are made here, at the bundle's image size (its LLM metadata), so neither side resizes
(litert-lm resizes with stb's Catmull-Rom, the processor with PIL's bicubic: a resize would be a
difference of preprocessing, not of the bundle): colored shapes, text drawn in white on black, and
seeded noise. Per image, one Conversation on one Engine (CPU, vision on CPU), the image attached as
a content part before the prompt (what `litert-lm run --attachment` sends), greedy, max_tokens;
PyTorch float32 greedy from the source's own chat template rendered with an image part, expanded and
preprocessed by the source's own processor (AutoProcessor), stopping at the source's end-of-sequence
ids (never the bundle's).

The reference attends causally within the image (no token_type_ids), as the exported prefill
does; Gemma 3's own path lets the image's soft tokens see each other, which no bundle run by
litert-lm can: how many replies still equal that path is measured (own_path_exact), not gated.

Pass iff at least min_exact_fraction of the images get PyTorch's reply exactly, and for every pair
of images on which PyTorch's first reply token differs, the runtime's first token differs too (the
swap check: an answer that does not follow the image fails even where the text happens to match).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from farm_common.gates.image_turn_parity import ImageTurnParity
from farm_toolchain import protocol
from farm_toolchain.gates import common
from farm_toolchain.gates.images import REFERENCE, image_size, make_images, reference_reply, runtime_reply, vision_engine
from farm_toolchain.gates.registry import MEASUREMENTS


@MEASUREMENTS.register("image_turn_parity")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    bundle = common.require_file(request, "bundle_path", "the .litertlm to run")
    model_dir = common.model_folder(request)
    stop_ids = common.stop_ids_arg(request)
    p = common.settings(request, ImageTurnParity)
    height, width = image_size(bundle)
    images = make_images(height, width)
    tokenizer = None
    rows, evidence = [], []
    with tempfile.TemporaryDirectory(prefix="farm-images-") as tmp, vision_engine(bundle) as engine:
        for name, image in images.items():
            png = Path(tmp) / f"{name}.png"
            image.save(png)
            protocol.progress(f"image turn: {name} ({width}x{height})")
            got = runtime_reply(engine, png, p.prompt, p.max_tokens)
            ref_ids = reference_reply(model_dir, image, p.prompt, p.max_tokens, stop_ids)
            own_ids = reference_reply(model_dir, image, p.prompt, p.max_tokens, stop_ids, bidirectional=True)
            tokenizer = tokenizer or REFERENCE["processor"].tokenizer
            want = tokenizer.decode(ref_ids, skip_special_tokens=True)
            got_ids = tokenizer.encode(got["reply"], add_special_tokens=False)
            rows.append({"image": name, "exact": got["error"] is None and got["reply"] == want,
                         "own_exact": got["error"] is None and got["reply"] == tokenizer.decode(
                             own_ids, skip_special_tokens=True),
                         "ref_first": ref_ids[0] if ref_ids else None,
                         "rt_first": got_ids[0] if got_ids else None, "error": got["error"]})
            evidence.append(f"{name}: runtime {common.short(got['reply'], 80)!r}"
                            f"{' (error: ' + got['error'] + ')' if got['error'] else ''} | "
                            f"PyTorch {common.short(want, 80)!r} -> {'same' if rows[-1]['exact'] else 'DIFFERENT'}")
    exact = sum(r["exact"] for r in rows)
    pairs = [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:] if a["ref_first"] != b["ref_first"]]
    unfollowed = [f"{a['image']}/{b['image']}" for a, b in pairs if a["rt_first"] == b["rt_first"]]
    findings = []
    if unfollowed:
        findings.append(f"the runtime's first token did not change between {', '.join(unfollowed)}, where "
                        "PyTorch's did: the answer does not follow the image")
    if exact < p.min_exact_fraction * len(rows):
        findings.append(f"{len(rows) - exact} of {len(rows)} image turns differ from PyTorch's processor path")
    own = sum(r["own_exact"] for r in rows)
    # Measured, not a failure: the runtime's prefill is causal, so no bundle can attend within the
    # image the way the model's own (token_type_ids) path does; the card says how far that moves it.
    evidence.append(f"against the model's own path (bidirectional attention within the image): {own} of "
                    f"{len(rows)} replies the same")
    status = "fail" if findings else "pass"
    metrics = {"images": len(rows), "exact": exact, "exact_fraction": exact / len(rows) if rows else 0.0,
               "own_path_exact": own, "swap_pairs": len(pairs), "swap_unfollowed": len(unfollowed), "image_height": height,
               "image_width": width}
    return common.result(status, metrics, evidence, findings)

"""grounding_probes: opposite questions about shipped images, the image attached.

Request:
    {"bundle_path": an image bundle, "model_dir": the source (the reference), "reference_stop_ids",
     the settings of farm_common/gates/grounding_probes.py GroundingProbes: "probes" [{"image", "prompt",
     "expect"}], "max_tokens"}

Each probe's image (images.py, at the bundle's image size) is attached to its prompt on one Engine
(CPU, vision on CPU), greedy; PyTorch answers the same through the source's processor. A probe passes
when the runtime's reply matches `expect` (case-insensitive). A probe PyTorch itself misses does not
measure the bundle: it fails naming that (choose probes the model answers; faithful conversion keeps
the model's mistakes). Pass iff every probe passes.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from farm_common.gates.grounding_probes import GroundingProbes
from farm_toolchain.gates import common
from farm_toolchain.gates.images import REFERENCE, image_size, make_images, reference_reply, runtime_reply, vision_engine
from farm_toolchain.gates.registry import MEASUREMENTS


@MEASUREMENTS.register("grounding_probes")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    bundle = common.require_file(request, "bundle_path", "the image bundle to ask")
    model_dir = common.model_folder(request)
    stop_ids = common.stop_ids_arg(request)
    p = common.settings(request, GroundingProbes)
    height, width = image_size(bundle)
    images = make_images(height, width)
    passed, evidence, findings = 0, [], []
    with tempfile.TemporaryDirectory(prefix="farm-probes-") as tmp, vision_engine(bundle) as engine:
        for i, probe in enumerate(p.probes):
            png = Path(tmp) / f"{i}-{probe.image}.png"
            images[probe.image].save(png)
            got = runtime_reply(engine, png, probe.prompt, p.max_tokens)
            ref = _reference_text(model_dir, images[probe.image], probe.prompt, p.max_tokens, stop_ids)
            pattern = re.compile(probe.expect, re.IGNORECASE)
            ok_rt, ok_pt = got["error"] is None and bool(pattern.search(got["reply"])), bool(pattern.search(ref))
            passed += ok_rt and ok_pt
            evidence.append(f"{probe.image} / {probe.prompt!r} expect /{probe.expect}/: runtime "
                            f"{common.short(got['reply'], 80)!r} ({'match' if ok_rt else 'NO MATCH'}), PyTorch "
                            f"{common.short(ref, 80)!r} ({'match' if ok_pt else 'NO MATCH'})")
            if not ok_pt:
                findings.append(f"PyTorch misses the {probe.image} probe too: it does not measure the bundle; "
                                "choose probes the model answers")
            elif not ok_rt:
                findings.append(f"the {probe.image} probe: the bundle answers {common.short(got['reply'], 60)!r}, "
                                f"not /{probe.expect}/ as PyTorch does")
    return common.result("pass" if passed == len(p.probes) else "fail",
                         {"probes": len(p.probes), "passed": passed, "image_height": height, "image_width": width},
                         evidence, findings)


def _reference_text(model_dir: Path, image: Any, prompt: str, max_tokens: int, stop_ids: list[int]) -> str:
    ids = reference_reply(model_dir, image, prompt, max_tokens, stop_ids, bidirectional=True)
    return REFERENCE["processor"].tokenizer.decode(ids, skip_special_tokens=True)

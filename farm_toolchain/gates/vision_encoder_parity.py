"""vision_encoder_parity: the exported vision encoder against PyTorch's vision tower, per patch.

Request:
    {"bundle_path": .litertlm with a vision encoder section, "model_dir": the source folder,
     optional "float_encoder_path": the float export's vision_encoder.tflite,
     the settings of farm_common/gates/vision_encoder_parity.py VisionEncoderParity: "float_min_correlation",
     "min_correlation"}

Each shipped image (images.py: shapes, text, noise, at the bundle's image size) goes to the exported
encoder as litert-lm gives it ([0, 1] NHWC pixels: images.runtime_pixels) and to PyTorch's vision
tower as the source's own processor prepares it (AutoProcessor: Gemma 3's [-1, 1]); the outputs
are compared patch by patch: the Pearson correlation over the hidden size (the smallest and the mean
over patches and images) and the largest absolute difference. The reference never sees the
bundle's bytes, so an encoder exported for other pixels than the runtime gives (litert-torch's own
Gemma 3 graph) fails here. Pass iff the bundle's smallest per-patch correlation is at least
min_correlation and, where the float encoder was given, its own at least float_min_correlation.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from farm_common.gates.vision_encoder_parity import VisionEncoderParity
from farm_toolchain import protocol
from farm_toolchain.gates import common
from farm_toolchain.gates.images import image_size, make_images, runtime_pixels
from farm_toolchain.gates.registry import MEASUREMENTS


def _encoder(path: Path) -> Any:
    """The encoder graph through the Interpreter where the runtime runs (this process, or the host
    of a CPU class: farm_toolchain/tflite_run.py)."""
    run = common.runtime_module("farm_toolchain.tflite_run")
    return lambda pixels: run.run_encoder(str(path), [pixels])[0]


def compare(pt: Any, lt: Any) -> dict[str, float]:
    """Per-patch Pearson correlation over the hidden size, and the largest |difference|."""
    import numpy as np

    a = np.asarray(pt, dtype=np.float64).reshape(-1, pt.shape[-1])
    b = np.asarray(lt, dtype=np.float64).reshape(-1, lt.shape[-1])
    a0, b0 = a - a.mean(1, keepdims=True), b - b.mean(1, keepdims=True)
    corr = (a0 * b0).sum(1) / np.maximum(np.sqrt((a0 ** 2).sum(1) * (b0 ** 2).sum(1)), 1e-30)
    return {"min_correlation": float(corr.min()), "mean_correlation": float(corr.mean()),
            "max_abs_diff": float(np.abs(a - b).max()), "patches": int(a.shape[0])}


@MEASUREMENTS.register("vision_encoder_parity")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    bundle = common.require_file(request, "bundle_path", "the .litertlm whose encoder to measure")
    model_dir = common.model_folder(request)
    float_path = common.optional_file(request, "float_encoder_path")
    p = common.settings(request, VisionEncoderParity)
    height, width = image_size(bundle)
    images = make_images(height, width)
    processor = AutoProcessor.from_pretrained(str(model_dir))
    model = AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tower = model.model.vision_tower
    with tempfile.TemporaryDirectory(prefix="farm-encoder-") as tmp:
        section = common.extract_tflite(bundle, Path(tmp) / "vision_encoder.tflite", "tf_lite_vision_encoder")
        targets = {"bundle": _encoder(Path(section["path"]))}
        if float_path is not None:
            targets["float"] = _encoder(float_path)
        pt_rows, lt_rows = [], {k: [] for k in targets}
        for name, image in images.items():
            protocol.progress(f"vision encoder: {name} ({width}x{height})")
            pixels = processor.image_processor(images=[image], return_tensors="pt").pixel_values
            with torch.no_grad():
                pt_rows.append(tower(pixel_values=pixels).last_hidden_state.numpy())
            for key, run in targets.items():
                lt_rows[key].append(np.asarray(run(runtime_pixels(image))))
    pt = np.concatenate(pt_rows)
    metrics: dict[str, Any] = {"images": len(images), "image_height": height, "image_width": width}
    evidence = [f"bundle's encoder section sha256 {section['sha256'][:12]}, {section['size']} B"]
    findings = []
    bounds = {"bundle": p.min_correlation, "float": p.float_min_correlation}
    for key in targets:
        m = compare(pt, np.concatenate(lt_rows[key]))
        metrics.update({f"{key}_{k}": v for k, v in m.items() if k != "patches"})
        metrics["patches"] = m["patches"]
        evidence.append(f"{key}: per-patch correlation min {m['min_correlation']:.10f}, mean "
                        f"{m['mean_correlation']:.10f}, max |diff| {m['max_abs_diff']:.3g} over {m['patches']} patches")
        if not m["min_correlation"] >= bounds[key]:
            findings.append(f"the {key} encoder's smallest per-patch correlation with PyTorch's tower is "
                            f"{m['min_correlation']:.6f} (< {bounds[key]}): it does not see what the model sees")
    return common.result("fail" if findings else "pass", metrics, evidence, findings)

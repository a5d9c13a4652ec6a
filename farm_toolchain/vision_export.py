"""The vision half of an image-text-to-text export (issue 21): which sources litert-torch exports
with their vision encoder, the processor's normalization moved into the encoder's graph, the parts
the export writes, and the image contract a bundle made from them keeps.

Why the normalization moves (measured on the tiny Gemma 3, litert-torch 0.10.0, litert-lm 0.18.1):
litert-lm's image preprocessor resizes the image to the metadata's height x width and hands the
encoder float NHWC pixels divided by 255 ([0, 1]; no mean, no std), while litert-torch exports
Gemma 3's tower as `vision_tower(pixel_values=images)` for the processor's normalized pixels
([-1, 1]). The runtime's image turn then equals PyTorch fed [0, 1] pixels, token for token, and
differs from PyTorch fed what its own processor makes. With (x - mean) / std in front of the tower
the runtime sees what the model was trained on. Only the shipped graph changes; the sample inputs
litert-torch traces with keep their shapes.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator

from farm_toolchain.protocol import BadInput

# litert-torch 0.10.0 model_ext/exportables.py get_vision_exportables: the model types it exports a
# vision encoder for. Anything else raises "Unsupported model type" deep in the export.
VISION_MODEL_TYPES = ("gemma3", "gemma3n", "gemma4", "gemma4_unified", "lfm2_vl")

# The files litert-torch's vision export writes next to model.tflite, by the bundle section's role.
PART_FILES = {"embedder": "embedder.tflite", "vision_encoder": "vision_encoder.tflite",
              "vision_adapter": "vision_adapter.tflite"}


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path} is missing or not valid JSON ({exc}): an image export needs it") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path} is not a JSON object")
    return data


def check_source(model_dir: Path) -> None:
    """Bad input unless litert-torch exports this source's vision encoder and the folder has the
    image processor's config (the export reads its size; the runtime's contract is that size)."""
    config = _json(model_dir / "config.json")
    model_type = config.get("model_type")
    if model_type not in VISION_MODEL_TYPES:
        raise BadInput(f"litert-torch exports no vision encoder for model_type {model_type!r} (it does for "
                       f"{', '.join(VISION_MODEL_TYPES)}): build this model as text only (leave `vision` out)")
    if "vision_config" not in config:
        raise BadInput(f"{model_dir / 'config.json'} has no vision_config: it is not an image-text-to-text model")
    processor(model_dir)


def processor(model_dir: Path) -> dict[str, Any]:
    """The image processor's size and pixel transform, as preprocessor_config.json says them."""
    cfg = _json(model_dir / "preprocessor_config.json")
    size = cfg.get("size") or {}
    height, width = size.get("height"), size.get("width")
    if not (isinstance(height, int) and isinstance(width, int) and height > 0 and width > 0):
        raise BadInput(f"{model_dir / 'preprocessor_config.json'}: size must give a height and a width "
                       f"(the static image the encoder takes), got {size!r}")
    rescale = cfg.get("rescale_factor", 1 / 255) if cfg.get("do_rescale", True) else 1.0
    if abs(rescale - 1 / 255) > 1e-9:
        raise BadInput(f"{model_dir / 'preprocessor_config.json'}: rescale_factor {rescale} is not 1/255; "
                       "litert-lm hands the encoder pixels / 255, so no other scale can be matched")
    normalize = bool(cfg.get("do_normalize", False))
    mean = [float(v) for v in cfg.get("image_mean", [0.0, 0.0, 0.0])] if normalize else [0.0, 0.0, 0.0]
    std = [float(v) for v in cfg.get("image_std", [1.0, 1.0, 1.0])] if normalize else [1.0, 1.0, 1.0]
    return {"height": height, "width": width, "mean": mean, "std": std}


@contextlib.contextmanager
def normalized_encoder(model_dir: Path) -> Iterator[None]:
    """For one export: the vision encoder litert-torch picks for the model is wrapped so that its
    graph starts with (x - mean) / std over the channels (NHWC) of the [0, 1] pixels it is given."""
    import torch
    from litert_torch.generative.export_hf.core import export_lib

    proc = processor(model_dir)
    mean = torch.tensor(proc["mean"], dtype=torch.float32).reshape(1, 1, 1, -1)
    std = torch.tensor(proc["std"], dtype=torch.float32).reshape(1, 1, 1, -1)
    exportables = export_lib.model_ext_exportables
    original = exportables.get_vision_exportables

    def wrapped(model_config: Any) -> Any:
        encoder, adapter, eoi = original(model_config)

        class NormalizedEncoder(encoder):  # type: ignore[misc, valid-type]
            def forward(self, images: Any) -> Any:  # noqa: D401 - the tower's input, normalized first
                return super().forward((images - mean) / std)

        NormalizedEncoder.__name__ = f"Normalized{encoder.__name__}"
        return NormalizedEncoder, adapter, eoi

    exportables.get_vision_exportables = wrapped
    try:
        yield
    finally:
        exportables.get_vision_exportables = original


def parts(out_dir: Path) -> dict[str, str]:
    """{role: path} of the parts the export wrote; the encoder and the embedder must be there."""
    found = {role: str(out_dir / name) for role, name in PART_FILES.items() if (out_dir / name).is_file()}
    missing = [r for r in ("embedder", "vision_encoder") if r not in found]
    if missing:
        raise RuntimeError(f"litert-torch's image export wrote no {', '.join(missing)} "
                           f"(files: {sorted(p.name for p in out_dir.iterdir())})")
    return found


def _io(path: str) -> dict[str, Any]:
    import mmap

    from farm_toolchain.tflite import signatures_at

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        sigs = signatures_at(buf)
    return next(iter(sigs.values()))


def image_contract(model_dir: Path, found: dict[str, str]) -> dict[str, Any]:
    """What a bundle with these parts takes per image: the size it is resized to, the encoder's
    patches, and the positions the runtime reserves in the prompt (the adapter's rows: litert-lm
    counts them from its output, soft tokens plus what the adapter appends, e.g. Gemma 3's
    <end_of_image> embedding)."""
    proc = processor(model_dir)
    config = _json(model_dir / "config.json")
    encoder = _io(found["vision_encoder"])
    out_shape = next(iter(encoder["outputs"].values()))
    contract: dict[str, Any] = {"height": proc["height"], "width": proc["width"], "mean": proc["mean"],
                                "std": proc["std"], "patches": out_shape[-2] if len(out_shape) >= 2 else None,
                                "soft_tokens": config.get("mm_tokens_per_image"), "images_per_turn": 1}
    if "vision_adapter" in found:
        adapter_out = next(iter(_io(found["vision_adapter"])["outputs"].values()))
        contract["positions_per_image"] = adapter_out[-2] if len(adapter_out) >= 2 else None
    return contract

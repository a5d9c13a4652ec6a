"""The images the image gates show a bundle, made here (no download) at the bundle's image size,
and the size itself as the bundle's LLM metadata gives it to the runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from farm_toolchain.gates import common
from farm_toolchain.protocol import BadInput


def make_images(height: int, width: int) -> dict[str, Any]:
    """{name: PIL image} at the given size, the same pixels on every machine."""
    import numpy as np
    from PIL import Image, ImageDraw

    shapes = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(shapes)
    d.rectangle([width // 8, height // 8, width // 2, height // 2], fill=(220, 30, 30))
    d.ellipse([width // 2, height // 2, width - width // 8, height - height // 8], fill=(30, 60, 220))
    text = Image.new("RGB", (width, height), "black")
    d = ImageDraw.Draw(text)
    for row, word in enumerate(("HELLO", "FARM", "2026")):
        d.text((2, 2 + row * max(height // 4, 10)), word, fill="white")
    rng = np.random.default_rng(21)
    noise = Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8), "RGB")
    return {"shapes": shapes, "text": text, "noise": noise}


def image_size(bundle: Path) -> tuple[int, int]:
    """The (height, width) the bundle's metadata tells the runtime to resize images to."""
    meta = common.llm_metadata(bundle)
    kind = meta.llm_model_type.WhichOneof("model_type")
    holder = getattr(meta.llm_model_type, kind) if kind else None
    height, width = getattr(holder, "image_tensor_height", 0), getattr(holder, "image_tensor_width", 0)
    if not height or not width:
        raise BadInput(f"{bundle} has no image size in its LLM metadata (model type {kind}): it takes no images")
    return int(height), int(width)


def runtime_pixels(image: Any) -> Any:
    """What litert-lm hands the vision encoder for an image already at the contract size: float
    NHWC [1, H, W, 3] pixels / 255 (its stb preprocessor: resize, then /255, no mean or std)."""
    import numpy as np

    return (np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0)[None]

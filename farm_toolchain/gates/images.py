"""What the image gates share: the images they show a bundle, made here (no download) at the
bundle's image size (as its LLM metadata gives it to the runtime), an Engine with its vision
executor, one image turn through the runtime, and PyTorch's reply through the source's processor."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

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


@contextlib.contextmanager
def vision_engine(bundle: Path) -> Iterator[Any]:
    """A new Engine on the CPU with its vision executor on the CPU too (litert-lm builds none without
    vision settings), one image per turn; closed when the block ends."""
    litert_lm = common.litert_lm()
    with common.engine_path(bundle) as path:
        engine = litert_lm.Engine(str(path), backend=common.cpu_backend(), vision_backend=common.cpu_backend(),
                                  max_num_images=1)
        try:
            yield engine
        finally:
            engine.close()


# The source's processor and image-text model, loaded once per toolchain process and folder.
REFERENCE: dict[str, Any] = {}


def runtime_reply(engine: Any, image_path: Path, prompt: str, max_tokens: int) -> dict[str, Any]:
    def run() -> tuple[str, int | None]:
        conv = engine.create_conversation(sampler_config=common.greedy_sampler(), max_output_tokens=max_tokens)
        try:
            message = {"role": "user", "content": [{"type": "image", "path": str(image_path)},
                                                    {"type": "text", "text": prompt}]}
            return common.message_text(conv.send_message(message)), None
        finally:
            conv.close()

    return common._generation(run)


def reference_reply(model_dir: Path, image: Any, prompt: str, max_tokens: int, stop_ids: list[int],
                    bidirectional: bool = False) -> list[int]:
    """PyTorch's greedy reply ids to one image turn, through the source's template and processor."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    key = str(model_dir.resolve())
    if REFERENCE.get("key") != key:
        REFERENCE.clear()
        REFERENCE.update(key=key, processor=AutoProcessor.from_pretrained(key),
                          model=AutoModelForImageTextToText.from_pretrained(key, dtype=torch.float32).eval())
    processor, model = REFERENCE["processor"], REFERENCE["model"]
    template = common.source_template(model_dir)
    if not template:
        raise BadInput(f"{model_dir} has no chat template: an image turn needs one")
    text = common.render_template(template, [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": prompt}]}], generation_prompt=True)
    inputs = dict(processor(text=text, images=[image], return_tensors="pt"))
    if not bidirectional:
        # Without token_type_ids Gemma 3 attends causally within the image too, as the exported
        # prefill does; with them, the image's soft tokens see each other (the model's own path).
        inputs.pop("token_type_ids", None)
    return common.reference_generate_inputs(model, inputs, max_tokens, stop_ids)

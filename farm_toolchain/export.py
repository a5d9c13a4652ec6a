"""`export`: float (unquantized) .tflite export of a local HF causal-LM folder with litert-torch.

Request:
    {"model_dir": str, "output_dir": str, "prefill_lengths": [8], "cache_length": 64,
     "options": {"use_fused_gdn": false, ...}, "source_grid": false, "weights_once": true}
Result:
    {"tflite_path": absolute path of the float .tflite,
     "signatures": {name: {"inputs": [...], "outputs": [...]}}, "seconds": float,
     "source_grid": {"split": n, "linears": n, "kept": {module: why}, "offset_params": n}   (source_grid only)}

`source_grid: true` splits every linear layer whose weights sit on an affine 4-bit block-32 grid (a
model dequantized from a Q4_0/Q4_1/Q4_K GGUF) into a symmetric-grid part and a per-block offset
part (farm_toolchain/grid.py), right after litert-torch loads the model and before it traces it, so
that a recipe can hold those weights exactly. A model with no such linear is bad input.

`weights_once: true` (the default) holds the model's weights once during the export instead of
litert-torch's three copies (farm_toolchain/weights_once.py; the bytes are the same); false runs
litert-torch's own path, which the memory benchmark (benchmarks/convert_memory.py) compares against.

`vision: true` (an image-text-to-text model whose vision encoder litert-torch exports: gemma3,
gemma3n, gemma4, lfm2_vl) exports the decoder with an external embedder and, beside model.tflite,
embedder.tflite, vision_encoder.tflite and vision_adapter.tflite (float, all of them: the farm
quantizes each by its recipe); the result adds "parts": {role: path} and "image": the image contract
(height, width, soft tokens per image, images per turn). litert-lm 0.18.1 hands the encoder the
image as [0, 1] pixels (stb resize to the contract size, /255, no mean or std), while litert-torch
0.10.0 exports the tower for the image processor's normalized pixels (Gemma 3: [-1, 1]); with
`normalize_in_graph: true` (the default) the processor's (x - mean) / std is put in front of the
tower inside the encoder's graph, so the device sees what the model was trained on. false exports
litert-torch's own graph (the image gates' negative control).

Calls litert_torch.generative.export_hf.export.export with quantization_recipe="none" (never None:
export() drops None arguments, and ExportableModuleConfig's default recipe is dynamic_wi8_afp32, so
None silently gives an int8 model) and bundle_litert_lm=False. `options` are passed through as keyword
arguments: ExportableModuleConfig fields (e.g. use_sdpa_composite) or model-extension flags.
litert-torch 0.10.0 rejects extra flags that are not in its `_KNOWN_EXTRA_KWARGS` set, although the
qwen3_5 extension reads `use_fused_gdn`, `gdn_mode` and `gdn_use_fp32` from extra_kwargs; we add those
names to that set before exporting (see MODEL_EXT_EXTRA_KWARGS).

No network: HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE are set before anything imports huggingface_hub,
and the model, tokenizer and chat template are read from model_dir. The export runs in a temporary
sibling of output_dir that is renamed into place on success; output_dir must be absent or empty.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from farm_common import export_options
from farm_toolchain import compat, protocol
from farm_toolchain.commands import COMMANDS, OFFLINE
from farm_toolchain.protocol import BadInput
from farm_toolchain.weights_once import weights_once

# Flags that litert-torch model extensions read from `export_config.extra_kwargs` but that
# exportable_module_config._KNOWN_EXTRA_KWARGS (0.10.0) does not list, so export() refuses them.
#   model_ext/qwen3_5/patch.py (apply_qwen3_5_model_patches): use_fused_gdn (default True: emits the
#   custom op `gated_delta_update`), gdn_mode (0), gdn_use_fp32 (True).
# With the types the extension reads them as (litert-torch declares none for them).
MODEL_EXT_EXTRA_KWARGS = {"use_fused_gdn": "bool", "gdn_mode": "int", "gdn_use_fp32": "bool"}

# Arguments this command owns; options may not override them.
RESERVED = frozenset(
    {
        "model",
        "output_dir",
        "task",
        "quantization_recipe",
        "bundle_litert_lm",
        "prefill_lengths",
        "cache_length",
        "cache_lengths",
        "keep_temporary_files",
        "trust_remote_code",
        "extra_kwargs",
        "use_random_weights",
    }
)


def _positive_ints(value: Any, name: str) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        raise BadInput(f"{name} must be a non-empty list of positive integers, got {value!r}")
    return value


def _check_architecture(config: dict[str, Any]) -> None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as causal

    archs = config.get("architectures") or []
    model_type = config.get("model_type")
    if config.get("is_encoder_decoder"):
        raise BadInput(f"unsupported architecture {archs or model_type}: encoder-decoder models cannot be exported")
    if not archs:
        if model_type in causal:
            return
        raise BadInput(f"unsupported model: config.json has no architectures and model_type {model_type!r} is not a causal LM")
    causal_classes = set(causal.values())
    for arch in archs:
        if arch in causal_classes:
            return
        # e.g. Qwen3_5ForConditionalGeneration (model_type qwen3_5) loads as Qwen3_5ForCausalLM.
        if arch.endswith("ForConditionalGeneration") and model_type in causal:
            return
    raise BadInput(
        f"unsupported architecture {', '.join(archs)} (model_type {model_type!r}): "
        "export needs a decoder-only causal LM (...ForCausalLM)"
    )


def _validate_model_dir(model_dir: Any) -> Path:
    if not isinstance(model_dir, str) or not model_dir:
        raise BadInput("model_dir is required: a local Hugging Face model folder")
    path = Path(model_dir).expanduser().resolve()
    if not path.is_dir():
        raise BadInput(f"model_dir {path} does not exist or is not a folder")
    cfg = path / "config.json"
    if not cfg.is_file():
        raise BadInput(f"model_dir {path} has no config.json: it is not a Hugging Face model folder")
    try:
        config = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{cfg} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise BadInput(f"{cfg} is not a JSON object")
    if not (path / "tokenizer.json").is_file():
        raise BadInput(f"model_dir {path} has no tokenizer.json: the export needs a fast (tokenizers) tokenizer")
    if not any(path.glob("*.safetensors")):
        raise BadInput(f"model_dir {path} has no *.safetensors weights")
    _check_architecture(config)
    has_template = (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file()
    if not has_template:
        try:
            has_template = bool(json.loads((path / "tokenizer_config.json").read_text()).get("chat_template"))
        except (OSError, ValueError, AttributeError):
            has_template = False
    if not has_template:
        protocol.progress(f"warning: {path} has no chat template; the bundle will have none")
    return path


def _validate_options(options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise BadInput(f"options must be an object of export flags, got {options!r}")
    taken = sorted(set(options) & RESERVED)
    if taken:
        raise BadInput(f"options may not set {taken}: the export command sets them itself")
    nulls = sorted(k for k, v in options.items() if v is None)
    if nulls:
        # export() drops None arguments, so a null would silently mean "the library default".
        raise BadInput(f"options {nulls} are null: omit them to use the default, or give a value")
    schema = options_schema()
    wrong = export_options.check(options, schema["options"], f"litert-torch {schema['litert-torch']}")
    if wrong:
        raise BadInput(wrong)
    return dict(options)


def options_schema() -> dict[str, Any]:
    """{"litert-torch": version, "options": {name: annotation}}: every keyword the installed
    litert-torch's export() takes (its parameters, ExportableModuleConfig's fields, its known extra
    flags) with the type it declares, read from its source text, not imported (importing
    litert-torch takes seconds and torch with it); the model extensions' flags (MODEL_EXT_EXTRA_KWARGS)
    with the farm's types; the names this command sets itself left out."""
    import ast
    import importlib.metadata

    dist = importlib.metadata.distribution("litert-torch")
    root = "litert_torch/generative/export_hf/"
    out: dict[str, str] = {}

    def tree(rel: str) -> ast.Module:
        return ast.parse(Path(dist.locate_file(root + rel)).read_text(encoding="utf-8"))

    for node in ast.walk(tree("core/exportable_module_config.py")):
        if isinstance(node, ast.ClassDef) and node.name == "ExportableModuleConfig":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    out[item.target.id] = ast.unparse(item.annotation)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in (
                "_KNOWN_EXTRA_KWARGS", "_DEPRECATED_EXTRA_KWARGS") for t in node.targets):
            for c in ast.walk(node.value):
                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                    out.setdefault(c.value, "Any")
    for node in ast.walk(tree("export.py")):
        if isinstance(node, ast.FunctionDef) and node.name == "export":
            for a in [*node.args.args, *node.args.kwonlyargs]:
                if a.annotation is not None:
                    out[a.arg] = ast.unparse(a.annotation)
    if "use_sdpa_composite" not in out or "cache_length" not in out:
        raise RuntimeError("litert-torch's export() and ExportableModuleConfig were not found where farm_toolchain "
                           f"reads them ({root}): update farm_toolchain/export.py options_schema")
    out.update(MODEL_EXT_EXTRA_KWARGS)
    return {"litert-torch": dist.version, "options": {k: v for k, v in sorted(out.items()) if k not in RESERVED}}


@COMMANDS.register("export_options")
def export_options_command(request: dict[str, Any]) -> dict[str, Any]:
    """The export options the installed litert-torch takes, with their declared types."""
    return options_schema()


def _register_model_ext_kwargs() -> None:
    from litert_torch.generative.export_hf.core import exportable_module_config as emc

    known = getattr(emc, "_KNOWN_EXTRA_KWARGS", None)
    if known is None:
        raise RuntimeError("litert-torch has no exportable_module_config._KNOWN_EXTRA_KWARGS; update farm_toolchain.export")
    emc._KNOWN_EXTRA_KWARGS = frozenset(known) | frozenset(MODEL_EXT_EXTRA_KWARGS)


def _signatures(tflite: Path) -> dict[str, dict[str, list[str]]]:
    """Each signature's input and output names, read from the flatbuffer where it lies (mmap), not
    by building an interpreter over the whole float model (which also fails on a custom op it
    cannot resolve); the names are the same, in the same order (checked on the tiny export)."""
    import mmap

    from farm_toolchain.tflite import signatures_at

    with open(tflite, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return {name: {"inputs": list(s["inputs"]), "outputs": list(s["outputs"])}
                for name, s in signatures_at(buf).items()}


def _chmod_like_mkdir(path: Path) -> None:
    """mkdtemp makes 0700 folders; give the renamed output the mode a plain mkdir would have."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)


# The model folder is local: a missing template would make litert-torch try the hub.
@COMMANDS.register("export", env=OFFLINE)
def handle(request: dict[str, Any]) -> dict[str, Any]:
    model_dir = _validate_model_dir(request.get("model_dir"))
    out = request.get("output_dir")
    if not isinstance(out, str) or not out:
        raise BadInput("output_dir is required: the folder to write the export into")
    out_path = Path(out).expanduser().resolve()
    if out_path.exists() and (not out_path.is_dir() or any(out_path.iterdir())):
        raise BadInput(f"output_dir {out_path} exists and is not empty: remove it or choose another output_dir")
    prefill_lengths = _positive_ints(request.get("prefill_lengths", [8]), "prefill_lengths")
    cache_length = request.get("cache_length", 64)
    if not isinstance(cache_length, int) or isinstance(cache_length, bool) or cache_length <= 0:
        raise BadInput(f"cache_length must be a positive integer, got {cache_length!r}")
    if max(prefill_lengths) > cache_length:
        raise BadInput(f"prefill_lengths {prefill_lengths} must not exceed cache_length {cache_length}")
    options = _validate_options(request.get("options"))
    source_grid = request.get("source_grid", False)
    if not isinstance(source_grid, bool):
        raise BadInput(f"source_grid must be true or false, got {source_grid!r}")
    hold_once = request.get("weights_once", True)
    if not isinstance(hold_once, bool):
        raise BadInput(f"weights_once must be true or false, got {hold_once!r}")

    vision = request.get("vision", False)
    if not isinstance(vision, bool):
        raise BadInput(f"vision must be true or false, got {vision!r}")
    normalize = request.get("normalize_in_graph", True)
    if not isinstance(normalize, bool):
        raise BadInput(f"normalize_in_graph must be true or false, got {normalize!r}")
    vision_args: dict[str, Any] = {}
    if vision:
        from farm_toolchain import vision_export

        vision_export.check_source(model_dir)
        # litert-torch's own values for an image export (its config sets the embedder external for
        # image_text_to_text); the encoder stays float here, quantized later by its own recipe.
        vision_args = {"task": "image_text_to_text", "export_vision_encoder": True,
                       "vision_encoder_quantization_recipe": "none", "externalize_embedder": True}

    protocol.progress("importing litert-torch")
    t_import = time.monotonic()
    export_mod = compat.ensure_litert_torch_importable()
    _register_model_ext_kwargs()
    protocol.progress(f"litert-torch imported in {time.monotonic() - t_import:.1f} s")

    out_path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_path.name}.tmp-", dir=out_path.parent))
    try:
        protocol.progress(
            f"exporting {model_dir.name}: prefill {prefill_lengths}, cache {cache_length}, options {options}"
        )
        t0 = time.monotonic()
        grid_report: dict[str, Any] = {}
        try:
            with _split_on_load(grid_report) if source_grid else contextlib.nullcontext(), \
                    (weights_once() if hold_once else contextlib.nullcontext({})) as once, \
                    (vision_export.normalized_encoder(model_dir) if vision and normalize else contextlib.nullcontext()):
                export_mod.export(
                    model=str(model_dir),
                    output_dir=str(work),
                    quantization_recipe="none",
                    bundle_litert_lm=False,
                    prefill_lengths=list(prefill_lengths),
                    cache_length=cache_length,
                    keep_temporary_files=True,
                    **vision_args,
                    **options,
                )
        except (ValueError, TypeError) as exc:
            text = str(exc)
            if "Unrecognized export flag" in text or "unexpected keyword argument" in text:
                # Drop litert-torch's hint "Pass them via extra_kwargs={...}": that path is validated too.
                detail = " ".join(
                    line.strip() for line in text.splitlines() if line.strip() and "extra_kwargs" not in line
                )
                raise BadInput(f"unknown export option: {detail}") from exc
            raise
        seconds = time.monotonic() - t0
        if once.get("assigned") or once.get("shared") or once.get("copied"):
            protocol.progress(f"weights held once: {once['assigned']} static model(s) on the source's tensors, "
                              f"{once['shared']} shared between signatures, {once['copied']} copied")
        if not (work / "model.tflite").is_file():
            raise RuntimeError(f"litert-torch finished but wrote no model.tflite (files: {sorted(os.listdir(work))})")
        _chmod_like_mkdir(work)
        if out_path.is_dir():
            out_path.rmdir()  # empty, checked above
        os.replace(work, out_path)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    tflite = out_path / "model.tflite"
    protocol.progress(f"exported {tflite} ({tflite.stat().st_size} bytes) in {seconds:.1f} s; reading signatures")
    # The request's peak resident memory (import + export) is added by protocol.serve.
    out = {"tflite_path": str(tflite), "signatures": _signatures(tflite), "seconds": round(seconds, 3)}
    if source_grid:
        out["source_grid"] = grid_report
    if vision:
        out["parts"] = vision_export.parts(out_path)
        out["image"] = {**vision_export.image_contract(model_dir, out["parts"]), "normalize_in_graph": normalize}
    return out


@contextlib.contextmanager
def _split_on_load(report: dict[str, Any]) -> Iterator[None]:
    """litert-torch's export loads the model with export_lib.load_model and traces what it returns:
    for the length of one export, the loaded model's linears on a 4-bit grid are split
    (farm_toolchain/grid.py) before the trace. `report` gets what was split and what was not."""
    from litert_torch.generative.export_hf.core import export_lib

    from farm_toolchain import grid

    original = export_lib.load_model

    def load_and_split(*args: Any, **kwargs: Any) -> Any:
        artifacts = original(*args, **kwargs)
        t = time.monotonic()
        done = grid.split_model(artifacts.model)
        linears = len(done["split"]) + len(done["kept"])
        if not done["split"]:
            example = next(((k, v) for k, v in done["kept"].items() if v not in (grid.TIED, grid.HEAD)), None)
            raise BadInput(f"source_grid: none of the model's {linears} linear layers sits on an affine 4-bit "
                           f"block-32 grid{f' ({example[0]}: {example[1]})' if example else ''}; a source_grid "
                           "recipe is for a checkpoint dequantized from a Q4_0/Q4_1/Q4_K GGUF: use another recipe "
                           "(e.g. dynamic_wi4_b32)")
        report.update(split=len(done["split"]), linears=linears, kept=done["kept"],
                      offset_params=done["offset_params"])
        protocol.progress(f"source_grid: split {len(done['split'])} of {linears} linear layers onto their 4-bit "
                          f"grid in {time.monotonic() - t:.1f} s (+{done['offset_params']} offset weights)")
        return artifacts

    export_lib.load_model = load_and_split
    try:
        yield
    finally:
        export_lib.load_model = original

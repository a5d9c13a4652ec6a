"""Hold the model's weights once while litert-torch exports a Qwen3.5 (litert-torch 0.10.0).

litert-torch's Qwen3.5 extension wraps the loaded Hugging Face model into its own static model
(`Qwen3_5StaticForCausalLM.from_hf_model`: a freshly initialised model, then `load_state_dict`, which
copies every weight) once per exportable module: once for the prefill signature, once for decode. The
static model's `lm_head` is a Linear of its own, so a tied embedding is copied into it as well. A
0.75B-parameter float32 model (3 GB of weights) so sat in memory five times over before tracing began:
the Hugging Face model, and two static models holding the weights plus the embedding again
(measured: benchmarks/convert_memory.py, issue 22).

For the length of one export, `weights_once()`:
- builds each static model with its Linear / Embedding initialisation skipped (the weights are about
  to be replaced; untouched pages of an uninitialised tensor are never resident) and loads the
  Hugging Face model's tensors with `assign=True` (the static model takes them, no copy; a tied
  embedding stays one tensor). If the static model has a parameter the Hugging Face state dict does
  not name (a model litert-torch does not expect), it falls back to litert-torch's own copy, so no
  parameter is ever left uninitialised;
- gives every exportable module of one source model and one export configuration (the prefill and
  the decode signature of a cache length) the same patched static model, instead of one each.

The values the export sees are the same (tests/integration/test_toolchain.py compares them, and
benchmarks/convert_memory.py the float export's sha256 against litert-torch's own path).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import Any, Iterator


@contextlib.contextmanager
def weights_once() -> Iterator[dict[str, int]]:
    """Patch litert-torch's Qwen3.5 extension for one export; yields counters of what it did
    ({"assigned": static models built on the source's tensors, "copied": built by copy (fallback),
    "shared": exportable modules given an existing static model})."""
    try:
        from litert_torch.generative.export_hf.model_ext.qwen3_5 import exportable_module as qexp
        from litert_torch.generative.export_hf.model_ext.qwen3_5 import modeling_qwen3_5_static as qstatic
    except ImportError:  # a litert-torch without the extension: nothing to patch
        yield {}
        return

    counts = {"assigned": 0, "copied": 0, "shared": 0}
    static_cls = qstatic.Qwen3_5StaticForCausalLM
    mixin = qexp.Qwen3_5ExportableMixin
    original_from_hf = static_cls.__dict__["from_hf_model"]
    original_init = mixin.__init__
    wrappers: dict[tuple[int, str], tuple[Any, Any]] = {}

    def from_hf_model(cls: type, hf_model: Any) -> Any:
        import torch

        config = copy.deepcopy(qstatic._unwrap_config(hf_model.config))
        with _skip_weight_init(torch):
            static_model = cls(config)
        result = static_model.load_state_dict(hf_model.state_dict(), strict=False, assign=True)
        if result.missing_keys:
            counts["copied"] += 1
            return original_from_hf.__func__(cls, hf_model)
        counts["assigned"] += 1
        return static_model

    def init(self: Any, model: Any, export_config: Any, source_model_artifacts: Any = None) -> None:
        key = None
        if not isinstance(model, qexp.Qwen3_5StaticModelHFWrapper):
            key = (id(model), _config_key(export_config))
            hit = wrappers.get(key)
            if hit is not None and hit[0] is model:
                model, key = hit[1], None
                counts["shared"] += 1
        original_init(self, model, export_config, source_model_artifacts)
        if key is not None and isinstance(self.model, qexp.Qwen3_5StaticModelHFWrapper):
            wrappers[key] = (model, self.model)

    static_cls.from_hf_model = classmethod(from_hf_model)
    mixin.__init__ = init
    try:
        yield counts
    finally:
        static_cls.from_hf_model = original_from_hf
        mixin.__init__ = original_init
        wrappers.clear()


def _config_key(export_config: Any) -> str:
    """What the static model's patches may read: the export configuration, less the cache length
    (the one field that differs between the modules of one cache length's signatures; a static model
    is shared only between modules whose configurations are otherwise equal)."""
    if dataclasses.is_dataclass(export_config):
        fields = {f.name: getattr(export_config, f.name) for f in dataclasses.fields(export_config)}
        fields.pop("cache_length", None)
        return repr(sorted(fields.items(), key=lambda kv: kv[0]))
    return repr(export_config)


@contextlib.contextmanager
def _skip_weight_init(torch: Any) -> Iterator[None]:
    """Linear and Embedding layers built without their random initialisation (their weights are
    replaced right after); every other module initialises as usual."""
    nn = torch.nn
    saved = (nn.Linear.reset_parameters, nn.Embedding.reset_parameters)
    nn.Linear.reset_parameters = lambda self: None
    nn.Embedding.reset_parameters = lambda self: None
    try:
        yield
    finally:
        nn.Linear.reset_parameters, nn.Embedding.reset_parameters = saved

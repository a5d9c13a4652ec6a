"""Import fixes for the pinned toolchain (litert-torch 0.10.0).

Why this exists: `import litert_torch.generative.export_hf.export` fails with
`ModuleNotFoundError: No module named 'tensorflow'`. The export package imports every model
extension eagerly, and `model_ext/bonsai_flux2/bonsai_flux2.py` (an image-generation model we never
export) does `from tensorflow.lite.python import schema_py_generated`. TensorFlow is not a dependency
of litert-torch and we do not install it (it is large and pins its own numpy/protobuf). The module that
line wants, the generated TFLite flatbuffer schema, ships in ai-edge-litert as
`ai_edge_litert.schema_py_generated`. Nothing on the text-generation path needs TensorFlow.

The fix: only when TensorFlow is not importable, register stand-in modules `tensorflow`,
`tensorflow.lite`, `tensorflow.lite.python` and `tensorflow.lite.python.schema_py_generated` (the last
is the real ai_edge_litert schema module), import the export package, then remove the stand-ins again
so that no other library later mistakes them for a real TensorFlow (e.g. `"tensorflow" in sys.modules`
checks). The already imported bonsai_flux2 module keeps its reference to the schema module.
If a real TensorFlow is installed, nothing is touched.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from types import ModuleType

_EXPORT_MODULE = "litert_torch.generative.export_hf.export"
_SHIM_NAMES = ("tensorflow", "tensorflow.lite", "tensorflow.lite.python")
_SCHEMA_NAME = "tensorflow.lite.python.schema_py_generated"


def _tensorflow_importable() -> bool:
    if "tensorflow" in sys.modules:
        return getattr(sys.modules["tensorflow"], "__farm_shim__", False) is False
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


def _install_shim() -> list[str]:
    """Register the stand-in modules; return the names added to sys.modules."""
    schema = importlib.import_module("ai_edge_litert.schema_py_generated")
    added: list[str] = []
    parent: ModuleType | None = None
    for name in _SHIM_NAMES:
        module = sys.modules.get(name)
        if module is None:
            module = types.ModuleType(name, "farm_toolchain.compat stand-in; see its docstring")
            # A package (so `from tensorflow.lite.python import ...` resolves through sys.modules)
            # with a spec whose origin is None: importlib.util.find_spec("tensorflow"), which
            # torch._dynamo.trace_rules calls while litert_torch imports it, needs a spec and then
            # ignores a module without an origin.
            module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
            module.__path__ = []
            module.__farm_shim__ = True
            sys.modules[name] = module
            added.append(name)
        if parent is not None:
            setattr(parent, name.rsplit(".", 1)[1], module)
        parent = module
    if _SCHEMA_NAME not in sys.modules:
        sys.modules[_SCHEMA_NAME] = schema
        added.append(_SCHEMA_NAME)
    setattr(sys.modules["tensorflow.lite.python"], "schema_py_generated", schema)
    return added


def ensure_litert_torch_importable() -> ModuleType:
    """Import and return `litert_torch.generative.export_hf.export`, shimming TensorFlow if needed.

    Idempotent; call it before any other litert_torch import in the process.
    """
    if _EXPORT_MODULE in sys.modules:
        return sys.modules[_EXPORT_MODULE]
    if _tensorflow_importable():
        module = importlib.import_module(_EXPORT_MODULE)
    else:
        added = _install_shim()
        try:
            module = importlib.import_module(_EXPORT_MODULE)
        finally:
            for name in reversed(added):
                sys.modules.pop(name, None)
    _restore_transformers_decorator()
    _experts_answer_as_transformers()
    return module


def _restore_transformers_decorator() -> None:
    """Undo litert-torch's process-wide patch of transformers.

    litert-torch 0.10.0 (export_hf/core/patches.py) replaces `transformers.integrations.
    use_kernel_forward_from_hub` at import, so that a model class decorated
    `@use_kernel_forward_from_hub("RMSNorm")` *imported afterwards* becomes litert-torch's own RMSNorm
    (exported as a STABLEHLO_COMPOSITE op). A class imported before keeps transformers' RMSNorm
    (exported as MUL/MEAN/ADD/RSQRT). So the bytes of an export depended on what the process had
    imported before (measured on the tiny Llama: float export 3578448e… in a toolchain process that
    had just made the model, fb664a6e… in a fresh one; `farm rebuild` of a bundle built on a cold
    cache said DIFFERS), and a gate's PyTorch reference loaded after an export ran litert-torch's
    RMSNorm instead of the model's own. With the decorator put back at once, every model class the
    farm loads (Llama's RMSNorm is the one the patch names; Gemma 3's and Qwen3.5's norms are
    decorated under other names) is transformers' own, in every process and for the reference."""
    import transformers.integrations

    patches = sys.modules.get("litert_torch.generative.export_hf.core.patches")
    original = getattr(patches, "original_use_kernel_forward_from_hub", None)
    if original is not None:
        transformers.integrations.use_kernel_forward_from_hub = original


def _experts_answer_as_transformers() -> None:
    """Make each litert-torch model class answer transformers' "can its experts implementation be
    set?" as the transformers class it patches does, whatever the process did before.

    transformers 5.24 decides it by reading the *source of the class's module* for
    `@use_experts_implementation` and caches the answer on the class it was asked of; a subclass
    inherits the cache only if its parent was asked first. litert-torch 0.10.0's
    `LiteRTGemma4TextModel` (model_ext/gemma4/patch.py, no decorator in that file) subclasses
    transformers' `Gemma4TextModel`. In a toolchain process that had just made the model (the
    source stage), the parent was asked first and the export worked; in a fresh one (the source
    cached: every hub checkpoint, every rebuild) `Gemma4ForCausalLM` set the config's experts
    implementation to `grouped_mm` and the inner model then refused it: `ValueError:
    LiteRTGemma4TextModel does not support setting experts implementation` (measured: tiny Gemma 4
    built, then converted again at another cache length). Asking each transformers base first,
    here, gives every process the same answer."""
    import transformers

    for name, module in list(sys.modules.items()):
        if not name.startswith("litert_torch.generative.export_hf.model_ext.") or module is None:
            continue
        for cls in list(vars(module).values()):
            if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)
                    and cls.__module__ == name):
                continue
            base = next((b for b in cls.__mro__[1:] if b.__module__.startswith("transformers.models.")), None)
            if base is not None and "_can_set_experts_implementation_cached_value" not in vars(cls):
                cls._can_set_experts_implementation_cached_value = bool(base._can_set_experts_implementation())

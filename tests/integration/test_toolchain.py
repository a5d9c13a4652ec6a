"""The subprocess protocol against the real toolchain env."""

import json
import subprocess
from pathlib import Path

import pytest

from farm.errors import BadInput
from farm.settings import Settings
from farm.toolchain import REPO_ROOT, Toolchain, code_digest

pytestmark = pytest.mark.slow


@pytest.fixture
def tc(toolchain_python, tmp_path):
    return Toolchain(Settings(home=tmp_path, toolchain_python=toolchain_python))


def test_versions_are_the_locked_ones(tc):
    v = tc.versions
    lock = (REPO_ROOT / "toolchain" / "requirements.txt").read_text()
    for name in ("litert-torch", "litert-lm", "litert-lm-builder", "ai-edge-quantizer", "transformers"):
        assert f"{name}=={v['packages'][name]}" in lock
    assert v["packages"]["torch"].startswith("2.13.0")
    ident = tc.identity
    # The adapter code is part of the toolchain's identity (and so of every cache key).
    assert ident["packages"]["farm_toolchain"] == code_digest()[:16]
    assert ident["freeze_sha256"] != v["freeze_sha256"]


def test_bad_input_is_one_line_and_progress_streams(tc, tmp_path):
    lines = []
    with pytest.raises(BadInput) as exc:
        tc.call("export", {"model_dir": str(tmp_path / "missing"), "output_dir": str(tmp_path / "o"),
                           "prefill_lengths": [8], "cache_length": 64, "options": {}}, progress=lines.append)
    msg = str(exc.value)
    assert msg.startswith("export: ") and "missing" in msg and "\n" not in msg


def test_library_prints_cannot_corrupt_the_result(toolchain_python):
    """Whatever a command prints to stdout ends up on stderr; stdout carries exactly one JSON object."""
    code = (
        "import sys; sys.argv=['x','versions']\n"
        "from farm_toolchain import protocol\n"
        "def handle(req):\n"
        "    print('noise from a library')\n"
        "    return {'echo': req}\n"
        "protocol.run(handle)\n"
    )
    proc = subprocess.run([toolchain_python, "-c", code], input='{"a": 1}', capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO_ROOT)}, timeout=60)
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"ok": True, "echo": {"a": 1}}
    assert "noise from a library" in proc.stderr


def test_unknown_command_is_refused(toolchain_python):
    proc = subprocess.run([toolchain_python, "-m", "farm_toolchain", "frobnicate"], input="{}",
                          capture_output=True, text=True, env={"PYTHONPATH": str(REPO_ROOT)}, timeout=60)
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_one_server_serves_many_requests_and_survives_bad_input(tc, tmp_path):
    tc.call("versions", {})
    pid = tc._server.proc.pid
    with pytest.raises(BadInput):
        tc.call("quantize", {"input_path": str(tmp_path / "nope.tflite"), "output_path": str(tmp_path / "o"),
                             "recipe": [], "exceptions": []})
    tc.call("versions", {})
    assert tc._server.proc.pid == pid
    tc.close()
    assert tc._server is None


def test_timeout_kills_the_server_and_the_next_call_gets_a_fresh_one(tc, built, tmp_path):
    from farm.errors import BuildFailed

    model_dir = json.loads(built.farm("lineage", built.sha256, "--json").stdout)["source"]["path"]
    tc.call("versions", {})
    first = tc._server.proc
    with pytest.raises(BuildFailed, match="timed out"):
        tc.call("export", {"model_dir": model_dir, "output_dir": str(tmp_path / "o"), "prefill_lengths": [8],
                           "cache_length": 64, "options": {"use_fused_gdn": False}}, timeout=2)
    assert first.poll() is not None
    assert tc.call("versions", {})["packages"]["litert-lm"] == "0.18.1"
    assert tc._server.proc.pid != first.pid


def test_importing_litert_torch_leaves_the_models_own_classes_in_place(toolchain_python):
    """litert-torch 0.10.0 swaps transformers' `use_kernel_forward_from_hub` at import, so a Llama
    imported afterwards got litert-torch's RMSNorm: an export's bytes depended on what the process
    had loaded before (tiny Llama: 3578448e… after make_model, fb664a6e… fresh), and a gate's
    reference ran the exporter's norm. farm_toolchain.compat puts transformers' decorator back."""
    code = ("from farm_toolchain import compat\n"
            "compat.ensure_litert_torch_importable()\n"
            "import transformers.models.llama.modeling_llama as m\n"
            "print(m.LlamaRMSNorm.__module__)\n")
    proc = subprocess.run([toolchain_python, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "transformers.models.llama.modeling_llama"


def test_litert_torchs_gemma4_model_answers_the_experts_question_as_transformers_does(toolchain_python):
    """transformers 5.24 decides whether a class's experts implementation can be set from the
    source of the class's own module and caches it on the class; litert-torch's
    LiteRTGemma4TextModel lives in a file without the decorator, so in a fresh process (a cached
    source: every hub checkpoint) the Gemma 4 export died with `does not support setting experts
    implementation`, and worked only after the source stage had asked transformers' class first.
    The negative control imports litert-torch without the fix and gets the defect."""
    ask = ("from litert_torch.generative.export_hf.model_ext.gemma4 import patch\n"
           "from transformers.models.gemma4 import modeling_gemma4 as m\n"
           "print(patch.LiteRTGemma4TextModel._can_set_experts_implementation(),"
           " m.Gemma4TextModel._can_set_experts_implementation())\n")
    fixed = "from farm_toolchain import compat\ncompat.ensure_litert_torch_importable()\n"
    bare = ("import importlib\nfrom farm_toolchain import compat\nadded = compat._install_shim()\n"
            "importlib.import_module(compat._EXPORT_MODULE)\n")
    answers = []
    for prelude in (fixed, bare):
        proc = subprocess.run([toolchain_python, "-c", prelude + ask], capture_output=True, text=True,
                              timeout=300, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        answers.append(proc.stdout.strip().splitlines()[-1])
    assert answers == ["True True", "False True"], answers


def test_every_toolchain_process_has_one_hash_seed(tc):
    """litert-torch 0.10.0's Gemma 4 export depends on hash order (the same inputs rebuilt as
    three different files); the server is started with PYTHONHASHSEED=0."""
    tc.call("versions", {})
    environ = Path(f"/proc/{tc._server.proc.pid}/environ").read_bytes().split(b"\0")
    assert b"PYTHONHASHSEED=0" in environ


# Runs litert-torch's own export of a tiny tied Qwen3.5 up to the conversion (Converter.convert is
# replaced by a stop that keeps the signatures), with and without farm_toolchain/weights_once.py.
_WEIGHTS_ONCE_PROBE = '''
import contextlib, json, tempfile
from pathlib import Path
import torch
from farm_toolchain import compat, make_model
from farm_toolchain.export import _register_model_ext_kwargs
from farm_toolchain.weights_once import weights_once
export = compat.ensure_litert_torch_importable()
_register_model_ext_kwargs()
from litert_torch._convert import interface

class Stop(Exception):
    pass

caught = []
def convert(self, *a, **k):
    caught.append(list(self._signatures))
    raise Stop()
interface.Converter.convert = convert
tmp = Path(tempfile.mkdtemp())
make_model.handle({**json.loads(TINY_QWEN35), "output_dir": str(tmp / "m")})
out, states = {}, {}
for mode in ("once", "bare"):
    with (weights_once() if mode == "once" else contextlib.nullcontext({})) as counts:
        try:
            export.export(model=str(tmp / "m"), output_dir=str(tmp / mode), quantization_recipe="none",
                          bundle_litert_lm=False, prefill_lengths=[8], cache_length=64,
                          keep_temporary_files=True, use_fused_gdn=False)
        except Stop:
            pass
    sigs = caught[-1]
    statics = list({id(s.module.model.static_model): s.module.model.static_model for s in sigs}.values())
    hf = {t.data_ptr() for t in sigs[0].module.model.original_hf_model.state_dict().values()}
    sds = [m.state_dict() for m in statics]
    out[mode] = {"signatures": [s.name for s in sigs], "static_models": len(statics), "counts": dict(counts),
                 "linears_on_source_tensors": all(t.data_ptr() in hf for sd in sds for k, t in sd.items()
                                                  if k.endswith("proj.weight")),
                 "tied": all(sd["lm_head.weight"].data_ptr() == sd["model.embed_tokens.weight"].data_ptr()
                             for sd in sds)}
    states[mode] = sds[0]
out["same_values"] = states["once"].keys() == states["bare"].keys() and all(
    torch.equal(states["once"][k], states["bare"][k]) for k in states["bare"])
print(json.dumps(out))
'''


def test_the_qwen3_5_export_holds_the_weights_once(toolchain_python):
    """litert-torch 0.10.0 copies a Qwen3.5's weights into a static model once per signature (and
    its tied embedding again into lm_head): five copies of a 3 GB model before tracing. With
    farm_toolchain/weights_once.py the prefill and decode signatures share one static model built on
    the source model's own tensors, with the same values (the float export's bytes are litert-
    torch's own: benchmarks/convert_memory.py compares their sha256). The negative control is
    litert-torch's own path, which the same probe finds holding two static models on copies."""
    from farm.families.tiny import make_model_request

    request = make_model_request("qwen3_5", seed=0, tokenizer={"vocab_size": 512},
                                 config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
                                         "tie_word_embeddings": True})
    probe = f"TINY_QWEN35 = {json.dumps(json.dumps(request))}\n" + _WEIGHTS_ONCE_PROBE
    proc = subprocess.run([toolchain_python, "-c", probe], capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    once, bare = out["once"], out["bare"]
    assert once["signatures"] == bare["signatures"] == ["prefill_8", "decode"]
    assert once["static_models"] == 1 and once["linears_on_source_tensors"] and once["tied"]
    assert once["counts"] == {"assigned": 1, "copied": 0, "shared": 1}
    assert out["same_values"]
    # negative control: litert-torch's own path
    assert bare["static_models"] == 2 and not bare["linears_on_source_tensors"] and not bare["tied"]

"""farm.litertlm against real bundles: litert_lm_builder (in the toolchain env) builds one with every
metadata value type and most section types, and the reader must agree with the builder's own peek
(the byte-by-byte cases are tests/unit/farm/test_litertlm.py)."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import textwrap
from pathlib import Path

import pytest

from farm.litertlm import BLOCK_SIZE, hash_sections, read_header

pytestmark = pytest.mark.slow


# --- real bundles from litert_lm_builder ---------------------------------------------------------

# Runs in the toolchain interpreter: builds a bundle with every metadata value type and most section
# types, then prints what litert_lm_builder's own peek reads back, as JSON.
_GENERATE = textwrap.dedent(
    r'''
    import io, json, os, struct, sys
    from litert_lm_builder import litertlm_builder as lb, litertlm_core as core, litertlm_peek as peek

    out, work, big = sys.argv[1], sys.argv[2], sys.argv[3] == "big"
    os.makedirs(work, exist_ok=True)
    def w(name, data):
        p = os.path.join(work, name)
        with open(p, "wb") as f:
            f.write(data)
        return p
    M, D = lb.Metadata, lb.DType
    b = lb.LitertLmFileBuilder()
    if big:
        for key, value, dt in [
            ("u8", 255, D.UINT8), ("i8", -128, D.INT8), ("u16", 65535, D.UINT16), ("i16", -2, D.INT16),
            ("u32", 0, D.UINT32), ("i32", -7, D.INT32), ("u64", 2**64 - 1, D.UINT64),
            ("i64", -2**63, D.INT64), ("f32", 0.1, D.FLOAT32), ("f64", 3.25, D.DOUBLE),
            ("yes", True, D.BOOL), ("no", False, D.BOOL), ("empty", "", D.STRING),
            ("name", "h\u00e9llo", D.STRING)]:
            b.add_system_metadata(M(key=key, value=value, dtype=dt))
        b.add_llm_metadata(w("llm.textproto", b"start_token { token_ids { ids: 1 } }\nmax_num_tokens: 64\n"))
        b.add_executor_metadata(w("exec.textproto", b"llm_executor_metadata { max_history_size: 3 }\n"))
        b.add_hf_tokenizer(w("tokenizer.json", json.dumps({"model": {"vocab": {"a": 0, "b": 1}}}).encode()))
        b.add_sentencepiece_tokenizer(w("sp.model", b"\x0a\x03abc"), model_type="embedder")
        # Not a real flatbuffer: the builder copies the bytes as they are. > 1 MiB, odd size.
        b.add_tflite_model(w("model.tflite", os.urandom((1 << 20) + 12345)), lb.TfLiteModelType.PREFILL_DECODE,
                           backend_constraint="cpu", additional_metadata=[M(key="zero", value=0, dtype=D.INT32)])
        b.add_tflite_weights(w("w.weight", bytes(range(256)) * 300), lb.TfLiteModelType.PREFILL_DECODE)
        b.add_generic_binary_data(w("gen.bin", b""), additional_metadata=[M(key="note", value="empty", dtype=D.STRING)])
    else:
        b.add_tflite_model(w("model.tflite", os.urandom(core.BLOCK_SIZE)), lb.TfLiteModelType.EMBEDDER)
    with open(out, "wb") as f:
        b.build(f)

    md = peek.read_litertlm_header(out, io.StringIO())
    with open(out, "rb") as f:
        head = f.read(32)
    sm, secs = md.SystemMetadata(), md.SectionMetadata()
    json.dump({
        "version": struct.unpack_from("<III", head, 8),
        "header_end": struct.unpack_from("<Q", head, 24)[0],
        "system": [peek.kvp_to_dict(sm.Entries(i)) for i in range(sm.EntriesLength())],
        "sections": [{
            "type": core.any_section_data_type_to_string(o.DataType()),
            "begin": o.BeginOffset(), "end": o.EndOffset(),
            "items": [peek.kvp_to_dict(o.Items(j)) for j in range(o.ItemsLength())],
            "model_type": peek.get_model_type(o),
        } for o in (secs.Objects(i) for i in range(secs.ObjectsLength()))],
    }, sys.stdout)
    '''
)


def _build(kind: str, tmp_path_factory, python: str) -> tuple[Path, Path, dict]:
    d = tmp_path_factory.mktemp(f"bundle_{kind}")
    script = d / "generate.py"
    script.write_text(_GENERATE)
    out = d / "model.litertlm"
    r = subprocess.run([python, str(script), str(out), str(d / "inputs"), kind], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out, d / "inputs", json.loads(r.stdout)


@pytest.fixture(scope="module")
def big_bundle(tmp_path_factory, toolchain_python):
    return _build("big", tmp_path_factory, toolchain_python)


@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory, toolchain_python):
    return _build("small", tmp_path_factory, toolchain_python)


@pytest.fixture(params=["big_bundle", "small_bundle"])
def built(request):
    return request.getfixturevalue(request.param)


def test_header_matches_builder_peek(built):
    path, _, ref = built
    h = read_header(path)
    assert list(h.version) == ref["version"]
    assert h.header_end == ref["header_end"]
    assert h.file_size == path.stat().st_size
    assert h.system_metadata == {e["key"]: e["value"] for e in ref["system"]}
    assert set(h.system_metadata) >= {"uuid", "creation_timestamp"}
    assert [(s.index, s.type, s.offset, s.end) for s in h.sections] == [
        (i, r["type"], r["begin"], r["end"]) for i, r in enumerate(ref["sections"])
    ]
    for s, r in zip(h.sections, ref["sections"]):
        assert s.metadata == {e["key"]: e["value"] for e in r["items"]}
        assert s.model_type == (r["model_type"].removeprefix("tf_lite_") if r["model_type"] else None)
        assert s.offset % BLOCK_SIZE == 0


def test_big_bundle_has_every_value_type(big_bundle):
    path, _, _ = big_bundle
    h = read_header(path)
    md = h.system_metadata
    assert {k: md[k] for k in ("u8", "i8", "u64", "i64", "u32", "yes", "no", "empty", "name")} == {
        "u8": 255, "i8": -128, "u64": 2**64 - 1, "i64": -(2**63), "u32": 0,
        "yes": True, "no": False, "empty": "", "name": "h\u00e9llo",
    }
    assert md["f32"] == struct.unpack("<f", struct.pack("<f", 0.1))[0] and md["f64"] == 3.25
    # bool, not 1/0 (True == 1 in Python, so compare the types too)
    assert {k: type(v).__name__ for k, v in md.items() if k in ("yes", "no", "u32", "f32", "name")} == {
        "yes": "bool", "no": "bool", "u32": "int", "f32": "float", "name": "str",
    }
    assert [s.type for s in h.sections] == [
        "LlmMetadataProto", "ExecutorMetadataProto", "HF_Tokenizer_Zlib", "SP_Tokenizer",
        "TFLiteModel", "TFLiteWeights", "GenericBinaryData",
    ]
    tfl = h.sections[4]
    assert tfl.model_type == "prefill_decode"
    assert tfl.metadata == {"model_type": "tf_lite_prefill_decode", "backend_constraint": "cpu", "zero": 0}
    assert h.sections[3].model_type == "embedder"


def test_section_hashes_match_byte_ranges(built):
    path, inputs, ref = built
    data = path.read_bytes()
    header = read_header(path)
    for chunk_size in (4093, BLOCK_SIZE, 1 << 20):
        file_sha, size, pairs = hash_sections(path, header, chunk_size=chunk_size)
        assert (file_sha, size) == (hashlib.sha256(data).hexdigest(), len(data))
        assert [s for s, _ in pairs] == header.sections
        for s, digest in pairs:
            assert digest == hashlib.sha256(data[s.offset : s.offset + s.size]).hexdigest()
    # The TFLiteModel section holds the input .tflite unchanged.
    (tfl,) = [d for s, d in pairs if s.type == "TFLiteModel"]
    assert tfl == hashlib.sha256((inputs / "model.tflite").read_bytes()).hexdigest()
    assert hash_sections(path) == (file_sha, size, pairs)  # reads the header itself when not given

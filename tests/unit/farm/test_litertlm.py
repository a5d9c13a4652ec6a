"""farm.litertlm: the stdlib-only .litertlm header reader and single-pass section hasher.

Tiny bundles built byte by byte (valid and broken): nothing but the stdlib. The reader against real
bundles of litert_lm_builder is tests/integration/test_litertlm_builder.py.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from farm.errors import BadInput
from farm.litertlm import BLOCK_SIZE, Section, hash_sections, read_header
from farmtest import REPO



# --- hand-made bundles -------------------------------------------------------------------------


def _header_flatbuffer(begin: int, end: int, data_type: int) -> bytes:
    """A LiteRTLMMetaData FlatBuffer with no system metadata and one SectionObject without items.

    Laid out by hand (offsets relative to the buffer; vtables sit before their tables, so each
    table's soffset to its vtable is positive): root uoffset, root vtable+table, SectionMetadata
    vtable+table, the objects vector, SectionObject vtable+table (begin u64, end u64, data_type u8).
    """
    buf = bytearray()
    buf += struct.pack("<I", 12)  # 0: root table at 12
    buf += struct.pack("<HHHH", 8, 8, 0, 4)  # 4: root vtable: slot0 absent, slot1 at +4
    buf += struct.pack("<iI", 12 - 4, 28 - 16)  # 12: root table; 16: -> SectionMetadata at 28
    buf += struct.pack("<HHHxx", 6, 8, 4)  # 20: SectionMetadata vtable: slot0 at +4
    buf += struct.pack("<iI", 28 - 20, 36 - 32)  # 28: SectionMetadata table; 32: -> vector at 36
    buf += struct.pack("<II", 1, 60 - 40)  # 36: vector of 1; 40: -> SectionObject at 60
    buf += struct.pack("<HHHHHHxxxx", 12, 24, 0, 4, 12, 20)  # 44: SectionObject vtable
    buf += struct.pack("<iQQBxxx", 60 - 44, begin, end, data_type)  # 60: SectionObject table
    return bytes(buf)


def _tiny_bundle(
    path: Path,
    payload: bytes = b"hello section",
    *,
    begin: int = BLOCK_SIZE,
    end: int | None = None,
    data_type: int = 3,
    file_len: int | None = None,
    magic: bytes = b"LITERTLM",
) -> Path:
    fb = _header_flatbuffer(begin, begin + len(payload) if end is None else end, data_type)
    data = bytearray(magic + struct.pack("<III4xQ", 1, 7, 0, 32 + len(fb)) + fb)
    data += bytes(max(0, begin - len(data))) + payload
    if file_len is not None:
        data = data[:file_len]
    path.write_bytes(bytes(data))
    return path


def test_hand_made_bundle_reads_and_hashes(tmp_path):
    payload = os.urandom(5000)
    p = _tiny_bundle(tmp_path / "m.litertlm", payload)
    h = read_header(p)
    assert h.version == (1, 7, 0)
    assert h.header_end == 32 + 84
    assert h.system_metadata == {}
    assert h.sections == [Section(index=0, type="TFLiteModel", offset=BLOCK_SIZE, size=5000, metadata={})]
    assert h.sections[0].model_type is None
    data = p.read_bytes()
    for chunk_size in (1, 333, BLOCK_SIZE, 1 << 20):
        file_sha, size, pairs = hash_sections(p, chunk_size=chunk_size)
        assert (file_sha, size) == (hashlib.sha256(data).hexdigest(), len(data))
        assert [(s.index, d) for s, d in pairs] == [(0, hashlib.sha256(payload).hexdigest())]


def test_unknown_section_type_is_kept_not_rejected(tmp_path):
    h = read_header(_tiny_bundle(tmp_path / "m.litertlm", data_type=200))
    assert h.sections[0].type == "AnySectionDataType(200)"


def test_hashing_a_large_section_keeps_memory_bounded(tmp_path):
    p = _tiny_bundle(tmp_path / "big.litertlm", b"")  # an empty section, then make it 64 MiB
    with open(p, "r+b") as f:
        fb = _header_flatbuffer(BLOCK_SIZE, BLOCK_SIZE + (64 << 20), 3)
        f.seek(32)
        f.write(fb)
        f.truncate(BLOCK_SIZE + (64 << 20))  # sparse zeros
    tracemalloc.start()
    try:
        _, size, pairs = hash_sections(p, chunk_size=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert size == BLOCK_SIZE + (64 << 20)
    assert pairs[0][1] == hashlib.sha256(bytes(64 << 20)).hexdigest()
    assert peak < 8 << 20, f"peak traced memory {peak} bytes while hashing a 64 MiB section"


def test_imports_with_the_stdlib_only():
    # -S: no site-packages at all, so any third-party import in farm.litertlm fails here.
    code = "import farm.litertlm, sys; assert 'flatbuffers' not in sys.modules"
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --- errors: one line naming the file and what is wrong ------------------------------------------


def _bad(path) -> str:
    with pytest.raises(BadInput) as e:
        read_header(path)
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_missing_file_and_directory(tmp_path):
    assert "does not exist" in _bad(tmp_path / "nope.litertlm")
    assert "is not a file" in _bad(tmp_path)


def test_wrong_magic(tmp_path):
    p = tmp_path / "model.gguf"
    p.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(100))
    assert "is not a LiteRT-LM file (magic b'GGUF\\x03\\x00\\x00\\x00' != b'LITERTLM')" in _bad(p)
    empty = tmp_path / "empty.litertlm"
    empty.write_bytes(b"")
    assert "magic b''" in _bad(empty)


def test_truncated_preamble(tmp_path):
    p = _tiny_bundle(tmp_path / "m.litertlm", file_len=20)
    assert "truncated" in _bad(p)


def test_truncated_header(tmp_path):
    p = _tiny_bundle(tmp_path / "m.litertlm", file_len=32 + 50)  # header end says 116
    msg = _bad(p)
    assert "truncated" in msg and "116" in msg


def test_header_end_too_small(tmp_path):
    p = _tiny_bundle(tmp_path / "m.litertlm")
    data = bytearray(p.read_bytes())
    data[24:32] = struct.pack("<Q", 8)
    p.write_bytes(bytes(data))
    assert "corrupt" in _bad(p)


def test_corrupt_flatbuffer(tmp_path):
    p = _tiny_bundle(tmp_path / "m.litertlm")
    data = bytearray(p.read_bytes())
    data[32:36] = struct.pack("<I", 0xFFFFFF00)  # root offset far outside the header
    p.write_bytes(bytes(data))
    assert "corrupt LiteRT-LM header" in _bad(p)


def test_vector_longer_than_header(tmp_path):
    p = _tiny_bundle(tmp_path / "m.litertlm")
    data = bytearray(p.read_bytes())
    data[32 + 36 : 32 + 40] = struct.pack("<I", 0xFFFFFFFF)  # the section vector's count
    p.write_bytes(bytes(data))
    assert "vector at 36 of 4294967295 entries runs past the header" in _bad(p)


def test_section_past_end_of_file(tmp_path):
    p = _tiny_bundle(tmp_path / "m.litertlm", b"x" * 1000, file_len=BLOCK_SIZE + 10)
    msg = _bad(p)
    assert "section 0" in msg and f"[{BLOCK_SIZE}, {BLOCK_SIZE + 1000})" in msg


def test_section_inside_header_or_reversed(tmp_path):
    assert "section 0" in _bad(_tiny_bundle(tmp_path / "a.litertlm", begin=64, end=80))
    assert "section 0" in _bad(_tiny_bundle(tmp_path / "b.litertlm", begin=BLOCK_SIZE, end=BLOCK_SIZE - 1))


def test_empty_last_section_past_eof_is_accepted_but_not_further(tmp_path):
    # The builder records an empty last section at the next 16 KiB boundary, past EOF.
    p = _tiny_bundle(tmp_path / "a.litertlm", b"", begin=2 * BLOCK_SIZE, file_len=BLOCK_SIZE + 5)
    (s,) = read_header(p).sections
    assert (s.offset, s.size) == (2 * BLOCK_SIZE, 0)
    assert hash_sections(p)[2][0][1] == hashlib.sha256(b"").hexdigest()
    q = _tiny_bundle(tmp_path / "b.litertlm", b"", begin=3 * BLOCK_SIZE, file_len=BLOCK_SIZE + 5)
    assert "section 0" in _bad(q)


def test_file_shrinking_after_header_was_read(tmp_path):
    p = _tiny_bundle(tmp_path / "m.litertlm", b"y" * 3000)
    header = read_header(p)
    with open(p, "r+b") as f:
        f.truncate(BLOCK_SIZE + 100)
    with pytest.raises(BadInput, match="section 0 ends at byte"):
        hash_sections(p, header)

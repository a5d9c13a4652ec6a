"""Read a LiteRT-LM (.litertlm) bundle's header and hash its sections, with the stdlib only.

The orchestrator must not import litert_lm_builder (it drags in flatbuffers, protobuf, absl), so this
module decodes the few FlatBuffer tables of the header by hand. The layout, as written by
litert_lm_builder 0.18.1 (`LitertLmFileBuilder._build_sections`, litertlm_builder.py:1285-1351):

    0   8 bytes  magic b"LITERTLM"
    8   3 x u32  version major, minor, patch (little-endian; the builder writes 1.7.0)
    20  4 bytes  zero padding
    24  u64      header end: absolute offset of the end of the FlatBuffer (= 32 + its size)
    32  ...      FlatBuffer `LiteRTLMMetaData` (no file identifier), up to header end
    then the sections, each starting on a 16 KiB boundary; the gaps are zero bytes and the file ends
    right after the last section (no trailing padding), except that an empty last section is
    recorded at the next boundary, past the end of the file.

Section offsets are absolute file offsets. Unknown section data types and metadata value types are
kept (as "AnySectionDataType(<n>)" / None) rather than rejected, so that a newer bundle can still be
hashed.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from farm.errors import BadInput

MAGIC = b"LITERTLM"
HEADER_END_OFFSET = 24  # where the u64 header end lives
HEADER_BEGIN = 32  # where the FlatBuffer starts
BLOCK_SIZE = 16 * 1024  # sections are aligned to this by the builder (not required here)
MAX_HEADER_SIZE = 64 << 20  # a real header is a few KiB; refuse to slurp a corrupt "header" of GBs

# schema.AnySectionDataType (litertlm_header_schema_py_generated.py:56-68).
SECTION_TYPES = {
    0: "NONE",
    1: "GenericBinaryData",
    2: "Deprecated",
    3: "TFLiteModel",
    4: "SP_Tokenizer",
    5: "LlmMetadataProto",
    6: "HF_Tokenizer_Zlib",
    7: "TFLiteWeights",
    8: "EmbeddingMetadataProto",
    9: "ExecutorMetadataProto",
    10: "TtsMetadataProto",
    11: "AsrMetadataProto",
}

# schema.VData union (litertlm_header_schema_py_generated.py:10-23): each member is a one-field
# table whose `value` sits in vtable slot 0. Scalars map to a struct format; 9 is StringValue.
_VDATA_SCALARS = {
    1: "<B",  # UInt8
    2: "<b",  # Int8
    3: "<H",  # UInt16
    4: "<h",  # Int16
    5: "<I",  # UInt32
    6: "<i",  # Int32
    7: "<f",  # Float32 (returned as the nearest Python float, like the builder's peek)
    8: "<?",  # Bool
    10: "<Q",  # UInt64
    11: "<q",  # Int64
    12: "<d",  # Double
}
_VDATA_STRING = 9

MetadataValue = Union[str, int, float, bool, None]


@dataclass(frozen=True)
class Section:
    index: int  # position in the header's section list (= order in the file for builder output)
    type: str  # AnySectionDataType name, e.g. "TFLiteModel", "HF_Tokenizer_Zlib", "LlmMetadataProto"
    offset: int  # absolute begin offset in the file
    size: int  # end - begin
    metadata: dict[str, MetadataValue] = field(default_factory=dict, hash=False)

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def model_type(self) -> str | None:
        """The section's `model_type` item without the builder's "tf_lite_" prefix
        ("tf_lite_prefill_decode" -> "prefill_decode"), as litertlm_peek writes it into model.toml.
        None when absent (LLM metadata sections; tokenizers added without a model type)."""
        value = self.metadata.get("model_type")
        if not isinstance(value, str):
            return None
        return value[len("tf_lite_"):] if value.startswith("tf_lite_") else value


@dataclass(frozen=True)
class Header:
    path: str
    version: tuple[int, int, int]
    header_end: int
    file_size: int  # size when the header was read
    system_metadata: dict[str, MetadataValue] = field(hash=False)  # e.g. uuid, creation_timestamp (ISO str)
    sections: list[Section] = field(hash=False)


class _Corrupt(Exception):
    """Raised inside the FlatBuffer decoder; turned into BadInput naming the file."""


class _FlatBuffer:
    """Just enough of the FlatBuffers wire format to walk tables, vectors, strings and unions.

    A table starts with an i32 soffset to its vtable (vtable = table - soffset). A vtable is
    u16 vtable size, u16 table size, then one u16 per field: the field's offset inside the table,
    0 when absent. Absent scalars take the schema default (0 / False): the builder omits default
    values, so e.g. an Int32 metadata item with value 0 has no `value` field at all.
    Offsets to tables/strings/vectors are u32 relative to where they are stored.
    """

    def __init__(self, buf: bytes):
        self.buf = buf

    def _unpack(self, fmt: str, pos: int):
        if pos < 0 or pos + struct.calcsize(fmt) > len(self.buf):
            raise _Corrupt(f"read at {pos} outside the {len(self.buf)}-byte header")
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def indirect(self, pos: int) -> int:
        return pos + self._unpack("<I", pos)

    def root(self) -> int:
        return self.indirect(0)

    def field_pos(self, table: int, slot: int) -> int | None:
        """Absolute position of field `slot` (0-based) of the table at `table`, or None if absent."""
        vtable = table - self._unpack("<i", table)
        vtable_size = self._unpack("<H", vtable)
        entry = 4 + 2 * slot
        if entry + 2 > vtable_size:
            return None
        off = self._unpack("<H", vtable + entry)
        return table + off if off else None

    def scalar(self, table: int, slot: int, fmt: str, default=0):
        pos = self.field_pos(table, slot)
        return default if pos is None else self._unpack(fmt, pos)

    def table(self, table: int, slot: int) -> int | None:
        pos = self.field_pos(table, slot)
        return None if pos is None else self.indirect(pos)

    def string(self, table: int, slot: int) -> str | None:
        pos = self.field_pos(table, slot)
        if pos is None:
            return None
        start = self.indirect(pos)
        length = self._unpack("<I", start)
        if start + 4 + length > len(self.buf):
            raise _Corrupt(f"string at {start} runs past the header")
        try:
            return self.buf[start + 4 : start + 4 + length].decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Corrupt(f"string at {start} is not UTF-8") from e

    def table_vector(self, table: int, slot: int) -> list[int]:
        pos = self.field_pos(table, slot)
        if pos is None:
            return []
        vec = self.indirect(pos)
        count = self._unpack("<I", vec)
        if vec + 4 + 4 * count > len(self.buf):
            raise _Corrupt(f"vector at {vec} of {count} entries runs past the header")
        return [self.indirect(vec + 4 + 4 * i) for i in range(count)]


def _key_values(fb: _FlatBuffer, tables: list[int]) -> dict[str, MetadataValue]:
    """KeyValuePair tables -> dict. KeyValuePair: slot 0 key (string), slot 1 value_type (u8, the
    union tag), slot 2 value (union table). Unknown value types give None; a repeated key keeps the
    last value (the builder refuses duplicate system keys; section items are never duplicated)."""
    out: dict[str, MetadataValue] = {}
    for kvp in tables:
        key = fb.string(kvp, 0)
        if key is None:
            continue
        tag = fb.scalar(kvp, 1, "<B")
        value_table = fb.table(kvp, 2)
        value: MetadataValue = None
        if value_table is not None:
            if tag == _VDATA_STRING:
                value = fb.string(value_table, 0)
            elif tag in _VDATA_SCALARS:
                default = {7: 0.0, 8: False, 12: 0.0}.get(tag, 0)  # absent field = schema default
                value = fb.scalar(value_table, 0, _VDATA_SCALARS[tag], default=default)
        out[key] = value
    return out


def _parse_flatbuffer(buf: bytes) -> tuple[dict[str, MetadataValue], list[tuple[int, int, int, dict]]]:
    # LiteRTLMMetaData: slot 0 system_metadata (SystemMetadata), slot 1 section_metadata.
    # SystemMetadata: slot 0 entries [KeyValuePair].  SectionMetadata: slot 0 objects [SectionObject].
    # SectionObject: slot 0 items [KeyValuePair], slot 1 begin_offset u64, slot 2 end_offset u64,
    # slot 3 data_type u8 (litertlm_header_schema_py_generated.py:1219-1285, 1377, 1493-1530).
    fb = _FlatBuffer(buf)
    root = fb.root()
    system = fb.table(root, 0)
    system_metadata = _key_values(fb, fb.table_vector(system, 0)) if system is not None else {}
    section_md = fb.table(root, 1)
    objects = fb.table_vector(section_md, 0) if section_md is not None else []
    sections = []
    for obj in objects:
        items = _key_values(fb, fb.table_vector(obj, 0))
        begin = fb.scalar(obj, 1, "<Q")
        end = fb.scalar(obj, 2, "<Q")
        data_type = fb.scalar(obj, 3, "<B")
        sections.append((data_type, begin, end, items))
    return system_metadata, sections


def read_header(path: str | os.PathLike) -> Header:
    """Read and validate a .litertlm header. Raises BadInput with one line naming the file."""
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"{p} is not a file" + (" (it does not exist)" if not p.exists() else ""))
    with open(p, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        prefix = f.read(HEADER_BEGIN)
        magic = prefix[:8]
        if magic != MAGIC:
            raise BadInput(f"{p} is not a LiteRT-LM file (magic {magic!r} != {MAGIC!r})")
        if len(prefix) < HEADER_BEGIN:
            raise BadInput(
                f"{p} is truncated: {file_size} bytes, shorter than the {HEADER_BEGIN}-byte LiteRT-LM preamble"
            )
        version = struct.unpack_from("<III", prefix, 8)
        (header_end,) = struct.unpack_from("<Q", prefix, HEADER_END_OFFSET)
        if header_end < HEADER_BEGIN + 4:
            raise BadInput(f"{p} has a corrupt LiteRT-LM header (header end {header_end} < {HEADER_BEGIN + 4})")
        if header_end > file_size:
            raise BadInput(f"{p} is truncated: its header ends at byte {header_end} but the file has {file_size} bytes")
        if header_end - HEADER_BEGIN > MAX_HEADER_SIZE:
            raise BadInput(
                f"{p} has a corrupt LiteRT-LM header ({header_end - HEADER_BEGIN} bytes > {MAX_HEADER_SIZE})"
            )
        buf = f.read(header_end - HEADER_BEGIN)
    if len(buf) != header_end - HEADER_BEGIN:
        raise BadInput(f"{p} shrank while its header was read")
    try:
        system_metadata, raw_sections = _parse_flatbuffer(buf)
    except _Corrupt as e:
        raise BadInput(f"{p} has a corrupt LiteRT-LM header: {e}") from None

    sections = []
    for i, (data_type, begin, end, items) in enumerate(raw_sections):
        # The builder seeks to the next 16 KiB boundary before writing each section, and seeking
        # past EOF does not grow the file: an empty *last* section begins (and ends) beyond EOF, at
        # most at file_size rounded up to a block. Accept that; it holds no bytes to hash.
        data_end = file_size if end > begin else -(-file_size // BLOCK_SIZE) * BLOCK_SIZE
        if not header_end <= begin <= end <= data_end:
            raise BadInput(
                f"{p}: section {i} spans bytes [{begin}, {end}), outside the data area "
                f"[{header_end}, {file_size}) (truncated or corrupt file)"
            )
        type_name = SECTION_TYPES.get(data_type, f"AnySectionDataType({data_type})")
        sections.append(Section(index=i, type=type_name, offset=begin, size=end - begin, metadata=items))
    return Header(
        path=str(p),
        version=(version[0], version[1], version[2]),
        header_end=header_end,
        file_size=file_size,
        system_metadata=system_metadata,
        sections=sections,
    )


def hash_sections(
    path: str | os.PathLike, header: Header | None = None, chunk_size: int = 1 << 20
) -> tuple[str, int, list[tuple[Section, str]]]:
    """Stream the file once; return (file sha256 hex, file size, [(section, section sha256 hex)]).

    Memory is bounded by chunk_size: each chunk feeds the whole-file digest and the slice of it
    that falls inside every section it overlaps (sections may overlap or leave gaps; neither matters).
    """
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    header = header if header is not None else read_header(path)
    sections = header.sections
    digests = [hashlib.sha256() for _ in sections]
    order = sorted(range(len(sections)), key=lambda i: sections[i].offset)
    next_up = 0  # index into `order` of the next section not yet started
    active: list[int] = []

    file_digest = hashlib.sha256()
    chunk = bytearray(chunk_size)
    view = memoryview(chunk)
    pos = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(chunk)
            if not n:
                break
            data = view[:n]
            file_digest.update(data)
            lo, hi = pos, pos + n
            while next_up < len(order) and sections[order[next_up]].offset < hi:
                active.append(order[next_up])
                next_up += 1
            still_active = []
            for i in active:
                s = sections[i]
                a, b = max(s.offset, lo), min(s.end, hi)
                if a < b:
                    digests[i].update(data[a - lo : b - lo])
                if s.end > hi:
                    still_active.append(i)
            active = still_active
            pos = hi

    for s in sections:
        if s.size and s.end > pos:  # (an empty last section may sit past EOF; see read_header)
            raise BadInput(f"{path}: section {s.index} ends at byte {s.end} but only {pos} bytes could be read")
    return file_digest.hexdigest(), pos, [(s, d.hexdigest()) for s, d in zip(sections, digests)]

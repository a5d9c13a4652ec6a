"""farm/export_cache.py and the convert stage's use of it: an export kept under its stage key is
replayed with its files and figures; one whose files do not hash as kept is dropped and the converter
runs; a farm without FARM_EXPORT_CACHE never reads one. (That `farm rebuild` never reads it is
tests/integration/test_rebuild.py, against a poisoned cache a build does replay.)"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from farm import export_cache
from farm.settings import Settings
from farm.stages.convert import _export

KEY = "a" * 64


def _exported(tmp_path: Path, parts: bool = False) -> dict:
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.tflite").write_bytes(b"TFL3 decoder")
    reply = {"tflite_path": str(out / "model.tflite"), "signatures": {"decode": {}}, "seconds": 41.5,
             "peak_rss_bytes": 123}
    if parts:
        (out / "embedder.tflite").write_bytes(b"TFL3 embedder")
        reply["parts"] = {"embedder": str(out / "embedder.tflite")}
        reply["image"] = {"height": 64}
    return reply


def test_a_kept_export_is_replayed_with_its_files_and_figures(tmp_path):
    cache = tmp_path / "cache"
    export_cache.keep(cache, KEY, _exported(tmp_path, parts=True))
    got = export_cache.replay(cache, KEY)
    assert got is not None and got["seconds"] == 41.5 and got["peak_rss_bytes"] == 123 and got["image"] == {"height": 64}
    assert Path(got["tflite_path"]).read_bytes() == b"TFL3 decoder"
    assert Path(got["parts"]["embedder"]).read_bytes() == b"TFL3 embedder"
    assert Path(got["tflite_path"]).parent == cache / KEY  # the cache's copy, not the converter's folder
    assert export_cache.replay(cache, "b" * 64) is None  # another key: nothing


def test_a_kept_file_that_does_not_hash_is_dropped_not_replayed(tmp_path):
    """The negative control: one byte changed in a kept export (a bad disk, a hand edit)."""
    cache = tmp_path / "cache"
    export_cache.keep(cache, KEY, _exported(tmp_path))
    model = cache / KEY / "model.tflite"
    model.write_bytes(b"TFL3 decodes")
    assert export_cache.replay(cache, KEY) is None
    assert not (cache / KEY).exists()


def test_prune_keeps_the_entries_used_last_under_the_size_and_removes_the_rest(tmp_path):
    """A long-lived cache (the test suite's, in FARM_CACHE) is pruned oldest-used first: an entry
    replayed is used, so an older-kept one that was replayed outlives a newer one that was not. The
    control: under the size, nothing goes."""
    import os
    import time

    cache = tmp_path / "cache"
    keys = ["a" * 64, "b" * 64, "c" * 64]
    for i, key in enumerate(keys):
        out = tmp_path / f"out{i}"
        out.mkdir()
        (out / "model.tflite").write_bytes(b"x" * 1000)
        export_cache.keep(cache, key, {"tflite_path": str(out / "model.tflite")})
        os.utime(cache / key / export_cache.REPLY, (time.time() - 100 + i, time.time() - 100 + i))
    assert export_cache.replay(cache, keys[0]) is not None  # the oldest kept, used just now
    (cache / ".half-copied").mkdir()
    os.utime(cache / ".half-copied", (time.time() - 7200, time.time() - 7200))
    assert export_cache.prune(cache, max_bytes=10_000) == []  # the control: under the size
    assert not (cache / ".half-copied").exists()
    assert export_cache.prune(cache, max_bytes=2_500) == [keys[1]]
    assert sorted(p.name for p in cache.iterdir()) == [keys[0], keys[2]]


def test_keeping_a_key_twice_keeps_the_first(tmp_path):
    cache = tmp_path / "cache"
    export_cache.keep(cache, KEY, _exported(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.tflite").write_bytes(b"another")
    export_cache.keep(cache, KEY, {"tflite_path": str(other / "model.tflite")})
    assert Path(export_cache.replay(cache, KEY)["tflite_path"]).read_bytes() == b"TFL3 decoder"
    assert [p.name for p in cache.iterdir()] == [KEY]  # no private folder left behind


class _Toolchain:
    def __init__(self, reply: dict | None):
        self.reply, self.calls = reply, 0

    def call(self, command, request, progress=None):
        assert command == "export"
        self.calls += 1
        if self.reply is None:
            raise AssertionError("the converter ran")
        return self.reply


def _res(tmp_path: Path, cache: Path | None, reply: dict | None):
    settings = Settings(home=tmp_path / "home", cache=tmp_path / "farm-cache", export_cache=cache)
    return SimpleNamespace(settings=settings, toolchain=_Toolchain(reply))


def test_the_convert_stage_replays_a_kept_export_and_keeps_a_new_one(tmp_path):
    cache = tmp_path / "cache"
    made = _exported(tmp_path)
    res = _res(tmp_path, cache, made)
    out, replayed = _export(res, KEY, {}, progress=lambda m: None)
    assert (out, replayed, res.toolchain.calls) == (made, False, 1)  # ran, and kept
    res = _res(tmp_path, cache, None)  # a converter that must not run
    out, replayed = _export(res, KEY, {}, progress=lambda m: None)
    assert replayed and Path(out["tflite_path"]).read_bytes() == b"TFL3 decoder"


def test_without_the_setting_the_converter_always_runs(tmp_path):
    """The control: a kept export under the same key is not read by a farm without FARM_EXPORT_CACHE."""
    cache = tmp_path / "cache"
    export_cache.keep(cache, KEY, _exported(tmp_path))
    res = _res(tmp_path, None, {"tflite_path": "converter's"})
    out, replayed = _export(res, KEY, {}, progress=lambda m: None)
    assert (out["tflite_path"], replayed, res.toolchain.calls) == ("converter's", False, 1)


@pytest.mark.parametrize("value, expected", [("", None), ("relative/exports", "abs")])
def test_the_setting_is_off_when_empty_and_absolute_when_set(monkeypatch, tmp_path, value, expected):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FARM_EXPORT_CACHE", value)
    got = Settings().export_cache
    assert got is None if expected is None else got == tmp_path / "relative" / "exports"


def test_a_reply_file_that_is_not_json_is_a_miss(tmp_path):
    (tmp_path / KEY).mkdir()
    (tmp_path / KEY / export_cache.REPLY).write_text("{not json")
    assert export_cache.replay(tmp_path, KEY) is None

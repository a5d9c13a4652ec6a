"""The content-addressed store, both backends: a local directory and S3 (a real moto server)."""

from __future__ import annotations

import hashlib
import http.server
import os
import signal
import threading
import time
import tracemalloc
import uuid
from pathlib import Path

import boto3
import pytest

from farm.errors import BadInput, StoreError
from farm.settings import Settings
from farm.store import LocalStore, ObjectRef, Store, object_key, open_store
from farm.store import _io
from farm.store.s3 import S3Store
from farmtest import free_port

MiB = 1 << 20
EMPTY_SHA = hashlib.sha256(b"").hexdigest()


# -- fixtures and helpers -----------------------------------------------------------------------


def s3_client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    endpoint = request.getfixturevalue("s3_server")
    bucket = f"farm-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=bucket)
    return S3Store(bucket, "team/artifacts", endpoint_url=endpoint, cache_dir=tmp_path / "cache")


def write_random(path: Path, size: int) -> str:
    data = os.urandom(size)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def stored_names(store: Store) -> list[str]:
    """Everything the backend holds: files under the local root (temp files included; not the
    verification stamps under verified/, which are bookkeeping), or the bucket's keys plus any
    multipart upload still open."""
    if isinstance(store, LocalStore):
        return sorted(str(p.relative_to(store.root)) for p in store.root.rglob("*")
                      if p.is_file() and p.relative_to(store.root).parts[0] != "verified")
    client = s3_client(store.endpoint_url)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=store.bucket).get("Contents", [])]
    uploads = client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
    return sorted(keys + [f"(multipart upload) {u['Key']}" for u in uploads])


def read_object(store: Store, sha: str) -> bytes:
    if isinstance(store, LocalStore):
        return store.path_for(sha).read_bytes()
    return s3_client(store.endpoint_url).get_object(Bucket=store.bucket, Key=store.key(sha))["Body"].read()


def overwrite_object(store: Store, sha: str, data: bytes) -> None:
    """Replace the stored bytes behind the store's back (bit rot, a tampering admin)."""
    if isinstance(store, LocalStore):
        path = store.path_for(sha)
        path.chmod(0o644)
        path.write_bytes(data)
    else:
        s3_client(store.endpoint_url).put_object(Bucket=store.bucket, Key=store.key(sha), Body=data)


def flip_byte(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def leftovers_beside(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.parent.iterdir()) if dest.parent.exists() else []


# -- round trip, idempotence, layout ------------------------------------------------------------


def test_put_get_round_trip(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "model.tflite"
    sha = write_random(src, 3 * MiB + 17)

    ref = store.put_file(src)

    assert isinstance(ref, ObjectRef)
    assert (ref.sha256, ref.size, ref.uri) == (sha, 3 * MiB + 17, store.uri(sha))
    assert store.exists(sha)
    dest = tmp_path / "out" / "nested" / "copy.bin"
    assert store.get_to_path(sha, dest) == dest
    assert dest.read_bytes() == src.read_bytes()
    assert leftovers_beside(dest) == ["copy.bin"]  # no temp file left beside it
    assert store.open_verified_path(sha).read_bytes() == src.read_bytes()


def test_put_empty_file(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "empty"
    src.write_bytes(b"")
    ref = store.put_file(src)
    assert (ref.sha256, ref.size) == (EMPTY_SHA, 0)
    assert store.get_to_path(EMPTY_SHA, tmp_path / "e2").read_bytes() == b""


def test_put_is_idempotent_and_does_not_upload_again(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "a.bin"
    sha = write_random(src, 2 * MiB)
    first = store.put_file(src)
    before = stored_names(store)

    if isinstance(store, LocalStore):
        inode = store.path_for(sha).stat().st_ino
    else:
        def no_upload(*args, **kwargs):
            raise AssertionError("an existing object was uploaded again")

        monkeypatch.setattr(store._client, "upload_file", no_upload)

    again = store.put_file(src)
    copy = tmp_path / "same-content-other-name.bin"
    copy.write_bytes(src.read_bytes())
    third = store.put_file(copy)

    assert first == again == third
    assert stored_names(store) == before  # one object, no temp files
    if isinstance(store, LocalStore):
        assert store.path_for(sha).stat().st_ino == inode  # not rewritten


def test_put_repairs_an_object_of_the_wrong_size(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    sha = write_random(src, MiB)
    store.put_file(src)
    overwrite_object(store, sha, src.read_bytes()[:1000])  # truncated

    ref = store.put_file(src)

    assert ref.size == MiB
    assert read_object(store, sha) == src.read_bytes()
    assert store.get_to_path(sha, tmp_path / "out").read_bytes() == src.read_bytes()


def test_content_address_layout(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    sha = write_random(src, 1234)
    store.put_file(src)
    expected_key = f"sha256/{sha[:2]}/{sha[2:4]}/{sha}"
    assert object_key(sha) == expected_key

    if isinstance(store, LocalStore):
        path = store.root / "sha256" / sha[:2] / sha[2:4] / sha
        assert stored_names(store) == [expected_key]
        assert (store.root / "verified" / sha).is_file()  # the stat it hashed right with
        assert store.uri(sha) == path.as_uri() == f"file://{store.root}/{expected_key}"
        assert path.stat().st_mode & 0o777 == 0o444  # objects are read-only
    else:
        assert stored_names(store) == [f"team/artifacts/{expected_key}"]
        assert store.uri(sha) == f"s3://{store.bucket}/team/artifacts/{expected_key}"
        head = s3_client(store.endpoint_url).head_object(Bucket=store.bucket, Key=store.key(sha))
        assert head["Metadata"]["sha256"] == sha
        assert head["ContentLength"] == 1234


def test_addresses_must_be_sha256(store: Store) -> None:
    with pytest.raises(BadInput, match="not a sha256 digest"):
        store.exists("abc")
    with pytest.raises(BadInput):
        store.uri("z" * 64)
    assert store.exists(EMPTY_SHA.upper()) is False  # upper case is the same digest


def test_put_of_a_missing_file_is_bad_input(store: Store, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="nope.bin"):
        store.put_file(tmp_path / "nope.bin")


# -- verification on read -----------------------------------------------------------------------


def test_get_verifies_and_leaves_nothing_at_dest(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    sha = write_random(src, 2 * MiB + 5)
    store.put_file(src)
    overwrite_object(store, sha, flip_byte(src.read_bytes(), MiB + 3))  # same size, one byte off

    dest = tmp_path / "out" / "a.bin"
    with pytest.raises(StoreError, match=f"corrupt.*{sha[:12]}|{sha[:12]}.*corrupt"):
        store.get_to_path(sha, dest)
    assert not dest.exists()
    assert leftovers_beside(dest) == []

    with pytest.raises(StoreError, match="corrupt"):
        store.open_verified_path(sha)
    if isinstance(store, S3Store):
        assert not (store.cache_dir / object_key(sha)).exists()


def test_get_does_not_touch_an_existing_dest_on_mismatch(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    sha = write_random(src, 4096)
    store.put_file(src)
    overwrite_object(store, sha, flip_byte(src.read_bytes(), 0))
    dest = tmp_path / "dest.bin"
    dest.write_bytes(b"previous")
    with pytest.raises(StoreError):
        store.get_to_path(sha, dest)
    assert dest.read_bytes() == b"previous"


def test_get_of_a_missing_object(store: Store, tmp_path: Path) -> None:
    dest = tmp_path / "x.bin"
    with pytest.raises(StoreError, match="not in the store"):
        store.get_to_path(EMPTY_SHA, dest)
    assert not dest.exists()
    with pytest.raises(StoreError, match="not in the store"):
        store.open_verified_path(EMPTY_SHA)


def test_delete(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    sha = write_random(src, 100)
    store.put_file(src)
    store.delete(sha)
    assert not store.exists(sha)
    assert stored_names(store) == []
    store.delete(sha)  # absent: no error


# -- no partial objects ---------------------------------------------------------------------------


class Boom(Exception):
    pass


@pytest.mark.parametrize("exc_type", [Boom, KeyboardInterrupt])
def test_failed_put_mid_stream_leaves_no_object(
    store: Store, tmp_path: Path, exc_type: type[BaseException]
) -> None:
    src = tmp_path / "big.bin"
    sha = write_random(src, 24 * MiB)  # multipart on S3
    seen = []
    # A shell that ignores SIGINT (a background job) starts Python without its handler: install it,
    # so the SIGINT below is a KeyboardInterrupt whatever shell ran the tests.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request_restore = lambda: signal.signal(signal.SIGINT, previous)  # noqa: E731

    def progress(n: int) -> None:  # runs in s3transfer's worker threads for S3
        seen.append(n)
        if sum(seen) > 9 * MiB and len(seen) < 10_000:
            if exc_type is KeyboardInterrupt:
                seen.extend([0] * 10_000)  # once
                # Ctrl-C: a real SIGINT to the main thread, which waits on the transfer
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            else:
                raise exc_type("interrupted mid-stream")

    try:
        with pytest.raises(exc_type):
            store.put_file(src, progress=progress)
            time.sleep(5)  # (only if the interrupt were lost: then the raises check fails)
    finally:
        request_restore()

    assert sum(seen) > 9 * MiB
    if isinstance(store, LocalStore):
        assert sum(seen) < 24 * MiB
    assert not store.exists(sha)
    assert stored_names(store) == []


@pytest.mark.parametrize("fail_at", [2, 7], ids=["early", "late"])
def test_source_read_error_mid_stream_leaves_no_object(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    # The local store reads the file once (copying while hashing); S3 hashes it in a first pass.
    src = tmp_path / "big.bin"
    sha = write_random(src, 8 * MiB)  # one pass reads 8 chunks + EOF
    calls = []
    real_fill = _io._fill

    def failing_fill(f, buf):  # runs in the reader thread
        calls.append(1)
        if len(calls) == fail_at:
            raise OSError(5, "Input/output error")
        return real_fill(f, buf)

    monkeypatch.setattr(_io, "_fill", failing_fill)
    with pytest.raises(StoreError, match="Input/output error"):
        store.put_file(src)
    monkeypatch.undo()
    assert len(calls) == fail_at
    assert not store.exists(sha)
    assert stored_names(store) == []


def test_put_fails_if_the_file_changes_while_stored(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    write_random(src, 16 * MiB)  # longer than the reader thread's read-ahead
    touched = []

    def progress(n: int) -> None:  # called while copying (local) or uploading (S3)
        if not touched:
            touched.append(1)
            with open(src, "ab") as f:
                f.write(b"X")

    with pytest.raises(StoreError, match="changed while"):
        store.put_file(src, progress=progress)
    assert touched
    assert stored_names(store) == []


# -- S3 specifics -----------------------------------------------------------------------------------


def test_s3_endpoint_down_fails_fast_with_the_endpoint(aws_env: None, tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    store = S3Store("farm-bucket", "p", endpoint_url=endpoint, cache_dir=tmp_path)
    src = tmp_path / "a.bin"
    write_random(src, 100)

    for op in (lambda: store.exists(EMPTY_SHA), lambda: store.put_file(src)):
        start = time.monotonic()
        with pytest.raises(StoreError) as info:
            op()
        assert time.monotonic() - start < 5
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith(f"cannot reach S3 endpoint {endpoint} (bucket farm-bucket): ")
        assert "check FARM_S3_ENDPOINT_URL and that the server is running" in message


def test_s3_missing_bucket_is_named(s3_server: str, tmp_path: Path) -> None:
    store = S3Store("no-such-bucket-here", endpoint_url=s3_server, cache_dir=tmp_path)
    with pytest.raises(StoreError, match="bucket no-such-bucket-here does not exist"):
        store.exists(EMPTY_SHA)


def test_s3_endpoint_that_is_not_s3(aws_env: None, tmp_path: Path) -> None:
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        store = S3Store("farm-bucket", endpoint_url=endpoint, cache_dir=tmp_path)
        with pytest.raises(StoreError, match=f"{endpoint}.*does not look like an S3 server"):
            store.exists(EMPTY_SHA)
    finally:
        server.shutdown()
        server.server_close()


def test_s3_open_verified_path_caches_and_reverifies(
    s3_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = f"farm-{uuid.uuid4().hex[:12]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    store = S3Store(bucket, endpoint_url=s3_server, cache_dir=tmp_path / "cache")
    src = tmp_path / "a.bin"
    sha = write_random(src, MiB)
    store.put_file(src)

    path = store.open_verified_path(sha)
    assert path == tmp_path / "cache" / object_key(sha)
    assert path.read_bytes() == src.read_bytes()

    downloads = []
    real_get = store._client.get_object
    monkeypatch.setattr(store._client, "get_object", lambda **kw: downloads.append(1) or real_get(**kw))
    assert store.open_verified_path(sha) == path
    assert downloads == []  # served from the cache

    path.chmod(0o644)
    path.write_bytes(flip_byte(src.read_bytes(), 7))  # the cached copy rots
    assert store.open_verified_path(sha).read_bytes() == src.read_bytes()
    assert downloads == [1]


def test_s3_object_cache_is_bounded_least_recently_used_first_never_in_use(s3_server: str, tmp_path: Path) -> None:
    """Three 1 MiB objects under a 2.5 MiB bound: after the third download the least recently used
    copy goes — unless it was used within the in-use window (the control: a window of an hour keeps
    everything, over the bound) or another hard link holds it."""
    bucket = f"farm-{uuid.uuid4().hex[:12]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    shas = []
    for name in "abc":
        write_random(tmp_path / name, MiB)
    loose = S3Store(bucket, endpoint_url=s3_server, cache_dir=tmp_path / "c1", cache_max_bytes=int(2.5 * MiB))
    for name in "abc":
        shas.append(loose.put_file(tmp_path / name).sha256)
    a, b, c = shas
    # In use (the default window of an hour): nothing is evicted, the cache stays over its bound.
    for sha in (a, b, c):
        loose.open_verified_path(sha)
    assert all((tmp_path / "c1" / object_key(x)).is_file() for x in shas)
    # Not in use (window 0): the least recently used goes; b used again after a stays, a goes.
    store = S3Store(bucket, endpoint_url=s3_server, cache_dir=tmp_path / "c2", cache_max_bytes=int(2.5 * MiB),
                    cache_in_use_s=0)
    store.open_verified_path(a)
    time.sleep(0.05)
    store.open_verified_path(b)
    linked = tmp_path / "engine-link"
    os.link(store.open_verified_path(b), linked)  # an Engine's private link: b is held
    time.sleep(0.05)
    store.open_verified_path(a)  # b is now the least recently used, but linked: a goes instead
    time.sleep(0.05)
    store.open_verified_path(c)
    cached = {x: (tmp_path / "c2" / object_key(x)).is_file() for x in shas}
    assert cached[b] and cached[c] and not cached[a], cached
    assert store.open_verified_path(a).read_bytes() == (tmp_path / "a").read_bytes()  # downloaded again


# -- open_store ---------------------------------------------------------------------------------


def test_open_store_parses_urls(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", cache=tmp_path / "cache", s3_endpoint_url="http://minio:9000")
    local = open_store(f"file://{tmp_path}/st", settings)
    assert isinstance(local, LocalStore) and local.root == tmp_path / "st"
    assert open_store(settings.resolved_store_url, settings).root == tmp_path / "home" / "store"

    s3 = open_store("s3://my-bucket/some/prefix/", settings)
    assert isinstance(s3, S3Store)
    assert (s3.bucket, s3.prefix, s3.endpoint_url) == ("my-bucket", "some/prefix", "http://minio:9000")
    assert s3.key(EMPTY_SHA) == f"some/prefix/{object_key(EMPTY_SHA)}"
    assert open_store("s3://b", settings).key(EMPTY_SHA) == object_key(EMPTY_SHA)


@pytest.mark.parametrize(
    "url", ["http://host/x", "gs://bucket/p", "/plain/path", "file://relative/dir", "s3:///nobucket"]
)
def test_open_store_rejects_other_urls(url: str, tmp_path: Path) -> None:
    with pytest.raises(BadInput) as info:
        open_store(url, Settings(home=tmp_path, cache=tmp_path))
    message = str(info.value)
    assert repr(url) in message
    assert "file:///" in message and "s3://bucket/prefix" in message


# -- bounded memory ---------------------------------------------------------------------------------


def write_sparse_random(path: Path, size: int) -> str:
    """Random 1 MiB blocks every 4 MiB, holes between: quick to write, not one repeated block."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for off in range(0, size, MiB):
            block = os.urandom(MiB) if off % (4 * MiB) == 0 else bytes(MiB)
            f.write(block)
            h.update(block)
    return h.hexdigest()


def test_large_file_streams_with_bounded_memory(store: Store, tmp_path: Path) -> None:
    size = 50 * MiB
    src = tmp_path / "large.bin"
    sha = write_sparse_random(src, size)
    warm = tmp_path / "warm.bin"
    write_random(warm, 100)
    store.put_file(warm)  # the S3 client and its models load before we measure

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        ref = store.put_file(src)
        _, put_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        dest = store.get_to_path(sha, tmp_path / "back.bin")
        _, get_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert ref.size == size and ref.sha256 == sha
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha
    # 4 x 1 MiB pipeline buffers locally; S3 parts are read lazily from the file
    limit = 8 * MiB if isinstance(store, LocalStore) else 16 * MiB
    print(f"{type(store).__name__}: put peak {put_peak / MiB:.2f} MiB, get peak {get_peak / MiB:.2f} MiB")
    assert put_peak < limit, f"put peaked at {put_peak / MiB:.1f} MiB"
    assert get_peak < limit, f"get peaked at {get_peak / MiB:.1f} MiB"


# -- healing -------------------------------------------------------------------------------------


def test_verify_tells_ok_missing_and_corrupt_cheaply_and_in_full(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    sha = write_random(src, 2 * MiB + 1)
    assert store.verify(sha) == "missing" and store.verify(sha, full=True) == "missing"
    store.put_file(src)
    assert store.verify(sha) == "ok" and store.verify(sha, full=True) == "ok"
    overwrite_object(store, sha, flip_byte(src.read_bytes(), 7))  # same size, one byte off
    # The cheap check sees it too: a write changes the stat (local) / leaves no recorded checksum (S3).
    assert store.verify(sha) == "corrupt" and store.verify(sha, full=True) == "corrupt"
    assert sha in set(store.list_objects())


def test_put_replaces_a_corrupt_object_of_the_same_size(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    sha = write_random(src, MiB)
    store.put_file(src)
    overwrite_object(store, sha, flip_byte(src.read_bytes(), 100))
    store.put_file(src)
    assert read_object(store, sha) == src.read_bytes() and store.verify(sha, full=True) == "ok"


def test_quarantine_moves_a_corrupt_object_aside(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    sha = write_random(src, 4096)
    store.put_file(src)
    overwrite_object(store, sha, flip_byte(src.read_bytes(), 1))
    where = store.quarantine(sha)
    assert where and "quarantine" in where
    assert store.verify(sha) == "missing" and sha not in set(store.list_objects())
    assert store.quarantine(sha) is None
    if isinstance(store, LocalStore):
        assert Path(where.removeprefix("file://")).read_bytes() == flip_byte(src.read_bytes(), 1)

"""S3 through a TCP proxy that the test kills mid-upload: one clear StoreError, no object, no open
multipart upload; through a proxy that is down from the start: one clear StoreError too. The S3
server is the real moto server over HTTP."""

from __future__ import annotations

import os
import socket
import threading
import uuid

import boto3
import pytest

from farmtest import free_port
from farm.errors import StoreError
from farm.store.s3 import S3Store

MiB = 1 << 20


class Proxy:
    """Forwards 127.0.0.1:port to the S3 server; `cut_after` bytes sent upstream, it drops every
    connection and stops accepting (the network going away mid-upload)."""

    def __init__(self, upstream_port: int, cut_after: int | None):
        self.port = free_port()
        self.upstream = upstream_port
        self.cut_after = cut_after
        self.sent = 0
        self.lock = threading.Lock()
        self.dead = threading.Event()
        self.conns: list[socket.socket] = []
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.dead.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            self.conns += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, counts: bool) -> None:
        try:
            while not self.dead.is_set():
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if counts and self.cut_after is not None:
                    with self.lock:
                        self.sent += len(data)
                        if self.sent > self.cut_after:
                            self.kill()
        except OSError:
            pass

    def kill(self) -> None:
        self.dead.set()
        for s in [self.server, *self.conns]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def bucket(s3_server):
    name = f"farm-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def _nothing_left(s3_server: str, bucket: str) -> None:
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


@pytest.mark.parametrize("size_mb", [4, 40], ids=["single-part", "multipart"])
def test_a_connection_cut_mid_upload_is_one_error_and_leaves_nothing(s3_server, bucket, tmp_path, size_mb):
    src = tmp_path / "a.bin"
    src.write_bytes(os.urandom(size_mb * MiB))
    proxy = Proxy(int(s3_server.rsplit(":", 1)[1]), cut_after=size_mb * MiB // 2)
    store = S3Store(bucket, "p", endpoint_url=f"http://127.0.0.1:{proxy.port}", cache_dir=tmp_path / "c",
                    connect_timeout=1, read_timeout=5, max_attempts=2)
    with pytest.raises(StoreError) as info:
        store.put_file(src)
    assert "\n" not in str(info.value) and "127.0.0.1" in str(info.value)
    assert proxy.sent > 0
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0  # no partial object, ever
    # The network back: the next put aborts the upload the cut left open (moto dates uploads in the
    # past) and stores the file; nothing else is left behind.
    live = S3Store(bucket, "p", endpoint_url=s3_server, cache_dir=tmp_path / "c")
    ref = live.put_file(src)
    assert live.verify(ref.sha256, full=True) == "ok"
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_an_endpoint_that_is_down_is_one_error(s3_server, bucket, tmp_path):
    src = tmp_path / "a.bin"
    src.write_bytes(b"x" * 1000)
    store = S3Store(bucket, "p", endpoint_url=f"http://127.0.0.1:{free_port()}", cache_dir=tmp_path / "c",
                    connect_timeout=1, read_timeout=2, max_attempts=1)
    with pytest.raises(StoreError, match="127.0.0.1"):
        store.put_file(src)
    _nothing_left(s3_server, bucket)

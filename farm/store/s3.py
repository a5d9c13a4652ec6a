"""A content-addressed store in an S3 bucket (AWS, MinIO, moto): ``<prefix>/sha256/ab/cd/<sha>``.

Atomicity: puts upload straight to the final key; there is no temp key + server-side copy.
S3 (and MinIO, moto) make an object visible only when its PutObject completes or its
CompleteMultipartUpload succeeds; an interrupted or failed multipart upload leaves only invisible
parts that HEAD/GET/LIST never show, which s3transfer aborts on failure — unless the failure is the
network itself, when the abort cannot reach S3 either (measured through a proxy cut mid-upload): the
next put of that key aborts an upload it finds open and older than 10 minutes, and a bucket lifecycle
rule AbortIncompleteMultipartUpload sweeps the rest. So the final key is exactly as
atomic as a copy from a temp key would be, while the copy would rewrite every object once more
server-side (a multipart copy above 5 GB) and could orphan temp objects after a crash. Two puts
of the same content race harmlessly: both write identical bytes.

The file is hashed before the upload (so an existing object is never uploaded again) and the
upload re-reads it; put_file compares the file's stat before hashing and after uploading and
deletes the object and fails if the file changed in between. Reads stream and verify the sha256
of every byte they hand out, so a bad object can never be used, only reported.
"""

from __future__ import annotations

import logging
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from farm.errors import BadInput, StoreError
from farm.store._io import StatStamps, TempFile, copy_and_hash, hash_file
from farm.store.base import ObjectRef, Progress, check_sha256, object_key

log = logging.getLogger(__name__)

MiB = 1 << 20
_MAX_PARTS = 10_000  # S3's limit on parts per multipart upload
_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"}


class S3Store:
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        cache_dir: str | Path | None = None,
        *,
        connect_timeout: float = 2.0,
        read_timeout: float = 60.0,
        max_attempts: int = 3,
        max_concurrency: int = 4,
        cache_max_bytes: int | None = None,
        cache_in_use_s: float = 3600.0,
    ):
        if not bucket:
            raise BadInput("an S3 store needs a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self.region = region
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        if cache_dir is None:
            from farm.settings import get_settings

            cache_dir = get_settings().cache / "s3-objects"
        self.cache_dir = Path(cache_dir)
        # The local copies are a cache: bounded (None: unbounded), the least recently used evicted
        # first after a download, never one used within cache_in_use_s (a gate's reference folder
        # links to its files) or hard-linked elsewhere (an Engine's private link).
        self.cache_max_bytes = cache_max_bytes
        self.cache_in_use_s = cache_in_use_s
        self._timeouts = (connect_timeout, read_timeout)
        self._max_attempts = max_attempts
        self._max_concurrency = max_concurrency
        self._session = boto3.session.Session(region_name=region)
        self._client_: Any = None
        self._bucket_checked = False

    def __repr__(self) -> str:
        return f"S3Store({self.url!r}, endpoint_url={self.endpoint_url!r})"

    # -- clients ------------------------------------------------------------------------------

    def _make_client(self, attempts: int) -> Any:
        connect_timeout, read_timeout = self._timeouts
        options: dict[str, Any] = {}
        if self.endpoint_url:
            # S3-compatible servers want path-style addressing, and some reject the newer
            # default flexible checksums; integrity comes from our own sha256 on every read.
            options = {
                "s3": {"addressing_style": "path"},
                "request_checksum_calculation": "when_required",
                "response_checksum_validation": "when_required",
            }
        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"total_max_attempts": attempts, "mode": "standard"},
            max_pool_connections=max(10, self._max_concurrency * 2),
            **options,
        )
        return self._session.client("s3", endpoint_url=self.endpoint_url, config=config)

    @property
    def _client(self) -> Any:
        if self._client_ is None:
            with self._errors("connect"):
                self._client_ = self._make_client(self._max_attempts)
        if not self._bucket_checked:
            self._check_bucket()
        return self._client_

    def _check_bucket(self) -> None:
        """One quick HEAD (a single attempt) so a dead endpoint or a missing bucket fails at
        once with a clear message, rather than after the data client's retries."""
        with self._errors("check bucket"):
            probe = self._make_client(1)
            try:
                probe.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                meta = exc.response.get("ResponseMetadata", {})
                if not any(h.lower().startswith("x-amz") for h in meta.get("HTTPHeaders", {})):
                    raise StoreError(
                        f"S3 endpoint {self._endpoint()} (bucket {self.bucket}) answered HTTP "
                        f"{meta.get('HTTPStatusCode', '?')} without any S3 headers: it does not look "
                        "like an S3 server; check FARM_S3_ENDPOINT_URL"
                    ) from None
                code = _code(exc)
                if code in {"404", "NoSuchBucket", "NotFound"}:
                    raise StoreError(self._no_bucket_message()) from None
                raise
            finally:
                probe.close()
        self._bucket_checked = True

    def _endpoint(self) -> str:
        if self.endpoint_url:
            return self.endpoint_url
        return self._client_.meta.endpoint_url if self._client_ is not None else "(AWS default)"

    def _no_bucket_message(self) -> str:
        return (
            f"S3 bucket {self.bucket} does not exist at {self._endpoint()}; create it "
            f"(e.g. `aws s3 mb s3://{self.bucket}`) or fix FARM_STORE_URL"
        )

    @contextmanager
    def _errors(self, action: str, key: str | None = None) -> Iterator[None]:
        """Turn botocore's exceptions into one-line StoreErrors."""
        where = f"s3://{self.bucket}/{key}" if key else self.url
        try:
            yield
        except (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError) as exc:
            raise StoreError(
                f"cannot reach S3 endpoint {self._endpoint()} (bucket {self.bucket}): "
                f"{_reason(exc)}; check FARM_S3_ENDPOINT_URL and that the server is running"
            ) from None
        except NoCredentialsError:
            raise StoreError(
                f"no AWS credentials for S3 endpoint {self._endpoint()} (bucket {self.bucket}); "
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            ) from None
        except ClientError as exc:
            code = _code(exc)
            if code == "NoSuchBucket":
                raise StoreError(self._no_bucket_message()) from None
            message = exc.response.get("Error", {}).get("Message") or code
            hint = "; check the AWS_* credentials" if code in _CREDENTIAL_CODES else ""
            raise StoreError(f"S3 {action} failed for {where}: {code}: {message}{hint}") from None
        except S3UploadFailedError as exc:
            if "NoSuchBucket" in str(exc):
                raise StoreError(self._no_bucket_message()) from None
            raise StoreError(f"S3 {action} failed for {where}: {exc}") from None
        except ReadTimeoutError as exc:
            raise StoreError(
                f"S3 {action} timed out for {where} at {self._endpoint()}: {_reason(exc)}"
            ) from None
        except BotoCoreError as exc:
            raise StoreError(f"S3 {action} failed for {where}: {exc}") from None

    # -- the Store API --------------------------------------------------------------------------

    def key(self, sha256: str) -> str:
        k = object_key(sha256)
        return f"{self.prefix}/{k}" if self.prefix else k

    def uri(self, sha256: str) -> str:
        return f"s3://{self.bucket}/{self.key(sha256)}"

    def _head(self, key: str) -> dict[str, Any] | None:
        client = self._client
        with self._errors("head", key):
            try:
                return client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                if _code(exc) in _MISSING_CODES:
                    return None
                raise

    def exists(self, sha256: str) -> bool:
        return self._head(self.key(sha256)) is not None

    def _transfer_config(self, size: int) -> TransferConfig:
        # Parts grow with the file so even a 100 GB model stays under S3's 10,000-part limit;
        # uploads from a file name read each part lazily, so memory does not grow with them.
        part = max(8 * MiB, -(-size // (_MAX_PARTS - 1)))
        part = -(-part // MiB) * MiB
        return TransferConfig(
            multipart_threshold=max(16 * MiB, part),
            multipart_chunksize=part,
            max_concurrency=self._max_concurrency,
            use_threads=True,
        )

    def put_file(self, path: str | Path, *, progress: Progress | None = None) -> ObjectRef:
        src = Path(path)
        try:
            before = _fingerprint(src)
            sha, size = hash_file(src)
        except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            raise BadInput(f"cannot store {src}: {exc.strerror or exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot read {src} to store it: {exc}") from None
        key = self.key(sha)
        ref = ObjectRef(sha256=sha, uri=self.uri(sha), size=size)
        head = self._head(key)
        if head is not None:
            if _head_vouches(head, sha, size):
                return ref  # already stored, and its recorded checksum is its name: no upload
            log.warning("replacing %s: its recorded size or checksum is not its content's", ref.uri)
        # A multipart upload of this key that a lost connection left open (its abort could not reach
        # S3 either; measured through a proxy cut mid-upload): its parts are invisible but kept.
        self.abort_stale_uploads(key)
        client = self._client
        with self._errors("upload", key):
            client.upload_file(
                str(src),
                self.bucket,
                key,
                # S3 checks the SHA-256 of what it receives and keeps it (single-part uploads: the
                # object's; multipart: a checksum of the parts'); the metadata names the whole file.
                ExtraArgs={"Metadata": {"sha256": sha}, "ContentType": "application/octet-stream",
                           "ChecksumAlgorithm": "SHA256"},
                Config=self._transfer_config(size),
                Callback=progress,
            )
        if _fingerprint(src) != before:
            self.delete(sha)
            raise StoreError(f"{src} changed while it was being stored; put it again once it is complete")
        return ref

    def _stream_to_fd(self, sha: str, fd: int | None) -> None:
        key = self.key(sha)
        client = self._client
        with self._errors("download", key):
            try:
                resp = client.get_object(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                if _code(exc) in _MISSING_CODES:
                    raise StoreError(f"object {sha} is not in the store at {self.url}") from None
                raise
            body = resp["Body"]
            try:
                actual, _ = _translate_stream_errors(copy_and_hash, body, fd)
            finally:
                body.close()
        if actual != sha:
            raise StoreError(
                f"object s3://{self.bucket}/{key} is corrupt: its bytes hash to {actual}; "
                "`farm store verify --repair` moves it aside, and the next build makes it again"
            )

    def get_to_path(self, sha256: str, dest: str | Path) -> Path:
        sha = check_sha256(sha256)
        dest = Path(dest)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with TempFile.beside(dest) as tmp:
                assert tmp.fd is not None
                self._stream_to_fd(sha, tmp.fd)
                tmp.commit(dest, mode=0o644)
        except OSError as exc:
            raise StoreError(f"cannot copy object {sha} to {dest}: {exc}") from None
        return dest

    def open_verified_path(self, sha256: str) -> Path:
        """Download into the cache dir (content-addressed, so safe to share) unless a verified
        copy is there already; a cached copy that no longer verifies is downloaded again."""
        sha = check_sha256(sha256)
        cached = self.cache_dir / object_key(sha)
        stamps = StatStamps(self.cache_dir / "verified")
        if cached.is_file():
            if stamps.vouches(cached, sha):
                return self._used(cached, sha)
            try:
                actual, _ = hash_file(cached)
            except OSError:
                actual = None
            if actual == sha:
                stamps.record(cached, sha)
                return self._used(cached, sha)
            log.warning("cached copy %s is corrupt; downloading it again", cached)
        self.get_to_path(sha, cached)
        os.chmod(cached, 0o444)
        stamps.record(cached, sha)
        self._used(cached, sha)
        self.evict(keep=sha)
        return cached

    def _used(self, cached: Path, sha: str) -> Path:
        """Mark the cached copy used now (a marker's mtime: touching the object would change the
        ctime its stat stamp vouches by)."""
        marker = self.cache_dir / "used" / sha
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:
            pass
        return cached

    def evict(self, keep: str | None = None) -> list[str]:
        """Bring the local object cache under cache_max_bytes, least recently used first; what was
        removed. Never `keep`, an object used within cache_in_use_s, or one with another hard link."""
        import fcntl
        import time

        if self.cache_max_bytes is None or not (self.cache_dir / "sha256").is_dir():
            return []
        removed: list[str] = []
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cache_dir / ".evict.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            objects = []
            for path in (self.cache_dir / "sha256").glob("*/*/*"):
                try:
                    st = path.stat()
                except OSError:
                    continue
                try:
                    used = (self.cache_dir / "used" / path.name).stat().st_mtime
                except OSError:
                    used = st.st_mtime
                objects.append((used, path, st))
            total = sum(st.st_size for _, _, st in objects)
            now = time.time()
            for used, path, st in sorted(objects, key=lambda o: o[0]):
                if total <= self.cache_max_bytes:
                    break
                if path.name == keep or now - used < self.cache_in_use_s or st.st_nlink > 1:
                    continue
                try:
                    path.unlink()
                except OSError:
                    continue
                (self.cache_dir / "used" / path.name).unlink(missing_ok=True)
                StatStamps(self.cache_dir / "verified").forget(path.name)
                total -= st.st_size
                removed.append(path.name)
        if removed:
            log.info("evicted %d object(s) from the S3 object cache %s (bound %d MB)", len(removed), self.cache_dir,
                     self.cache_max_bytes // 2**20)
        return removed

    def delete(self, sha256: str) -> None:
        key = self.key(sha256)
        client = self._client
        with self._errors("delete", key):
            client.delete_object(Bucket=self.bucket, Key=key)

    def _head_checked(self, key: str) -> dict[str, Any] | None:
        client = self._client
        with self._errors("head", key):
            try:
                return client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
            except ClientError as exc:
                if _code(exc) in _MISSING_CODES:
                    return None
                raise

    def verify(self, sha256: str, full: bool = False) -> str:
        """"ok", "missing" or "corrupt". Without `full`: the object's recorded SHA-256 (what S3 checked
        on upload, and the farm's metadata) against its name — a HEAD, no download; an object written
        behind the farm's back carries neither. With `full`: every byte streamed and hashed."""
        sha = check_sha256(sha256)
        head = self._head_checked(self.key(sha))
        if head is None:
            return "missing"
        if not full:
            return "ok" if _head_vouches(head, sha, None) else "corrupt"
        try:
            self._stream_to_fd(sha, None)
        except StoreError as exc:
            return "missing" if "not in the store" in str(exc) else "corrupt"
        return "ok"

    def quarantine(self, sha256: str) -> str | None:
        """Copy a (corrupt) object to <prefix>/quarantine/ and delete it from its address."""
        sha = check_sha256(sha256)
        key = self.key(sha)
        if self._head(key) is None:
            return None
        dest = f"{self.prefix + '/' if self.prefix else ''}quarantine/{sha}"
        client = self._client
        with self._errors("quarantine", key):
            client.copy({"Bucket": self.bucket, "Key": key}, self.bucket, dest)
            client.delete_object(Bucket=self.bucket, Key=key)
        cached = self.cache_dir / object_key(sha)
        if cached.exists():
            cached.unlink()
        return f"s3://{self.bucket}/{dest}"

    def abort_stale_uploads(self, key: str | None = None, older_than_s: float = 600) -> int:
        """Abort multipart uploads under `key` (default: the whole prefix) started more than
        `older_than_s` ago (a live upload of the same content is left alone); how many."""
        import datetime as _dt

        prefix = key or (f"{self.prefix}/" if self.prefix else "")
        client = self._client
        cutoff = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=older_than_s)
        aborted = 0
        with self._errors("list uploads", prefix):
            uploads = client.list_multipart_uploads(Bucket=self.bucket, Prefix=prefix).get("Uploads", [])
            for up in uploads:
                if key is not None and up["Key"] != key:
                    continue
                if up.get("Initiated") and up["Initiated"] > cutoff:
                    continue
                client.abort_multipart_upload(Bucket=self.bucket, Key=up["Key"], UploadId=up["UploadId"])
                aborted += 1
        return aborted

    def list_objects(self):
        prefix = f"{self.prefix}/sha256/" if self.prefix else "sha256/"
        client = self._client
        with self._errors("list", prefix):
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    name = obj["Key"].rsplit("/", 1)[-1]
                    if len(name) == 64:
                        yield name


def _head_vouches(head: dict[str, Any], sha: str, size: int | None) -> bool:
    """A HEAD's recorded checksum says the object is `sha`: the farm's metadata names it, and S3's own
    SHA-256 (single-part objects; a multipart one's is a checksum of parts, "…-N") agrees."""
    import base64

    if size is not None and head.get("ContentLength") != size:
        return False
    if (head.get("Metadata") or {}).get("sha256") != sha:
        return False
    s3_sum = head.get("ChecksumSHA256")
    if s3_sum and "-" not in s3_sum:
        return s3_sum == base64.b64encode(bytes.fromhex(sha)).decode()
    return True


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _reason(exc: BaseException) -> str:
    """The low-level cause (e.g. "[Errno 111] Connection refused"), not botocore's wrapper text
    that repeats the URL."""
    kwargs = getattr(exc, "kwargs", {}) or {}
    err = kwargs.get("error")
    if isinstance(exc, ConnectTimeoutError):
        return "connection timed out"
    if err is not None:
        text = str(err)
        # urllib3 says "AWSHTTPConnection(host='h', port=1): Failed to establish a new
        # connection: [Errno 111] Connection refused"; the endpoint is in our message already.
        return re.sub(r"^(<[^>]*>|\w+\(host=[^)]*\)): ", "", text)
    return str(exc)


def _translate_stream_errors(fn: Any, *args: Any) -> Any:
    """Errors while reading a response body come from urllib3, not botocore."""
    from urllib3.exceptions import HTTPError as Urllib3Error

    try:
        return fn(*args)
    except Urllib3Error as exc:
        raise StoreError(f"S3 download interrupted: {exc}") from None


def _fingerprint(path: Path) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

"""The content-addressed artifact store: ``open_store(url, settings)`` gives a LocalStore for
``file:///path`` or an S3Store for ``s3://bucket/prefix``.

boto3 is imported only when an S3 store is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from farm.errors import BadInput
from farm.store._io import hash_file
from farm.store.base import ObjectRef, Progress, Store, check_sha256, object_key
from farm.store.local import LocalStore

if TYPE_CHECKING:
    from farm.settings import Settings

__all__ = ["LocalStore", "hash_file", "ObjectRef", "Progress", "Store", "check_sha256", "object_key", "open_store"]

_FORMS = "file:///absolute/path or s3://bucket/prefix"


def open_store(url: str, settings: Settings | None = None) -> Store:
    """The store a FARM_STORE_URL names. Opening does no I/O against S3; the first operation
    checks the endpoint and the bucket."""
    parts = urlsplit(url.strip())
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise BadInput(f"store URL {url!r} is not an absolute file URL; use {_FORMS}")
        return LocalStore(unquote(parts.path))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise BadInput(f"store URL {url!r} names no bucket; use {_FORMS}")
        if settings is None:
            from farm.settings import get_settings

            settings = get_settings()
        from farm.store.s3 import S3Store

        return S3Store(
            bucket=parts.netloc,
            prefix=unquote(parts.path),
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            cache_dir=settings.cache / "s3-objects",
            cache_max_bytes=int(settings.s3_cache_max_gb * 2**30) if settings.s3_cache_max_gb else None,
        )
    raise BadInput(f"unsupported store URL {url!r}; use {_FORMS}")

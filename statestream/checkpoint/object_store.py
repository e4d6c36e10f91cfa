"""Create-if-absent on an object store: what keeps one writer per checkpoint where there is no
atomic rename and no file lock.

A local or mounted checkpoint writes a log entry to a temporary file and renames it into place,
under the ``flock`` of ``checkpoint.writer_lock``. S3 has neither: a "rename" is a copy and a
delete, and two writers that both find ``offsets/7`` missing would both write it, the later one
silently replacing the earlier. S3 does have a conditional PUT (``If-None-Match: *``, since
2024): the object is created only if no object of that key exists, atomically, and the loser
gets HTTP 412. Every write-once file of the checkpoint (the offset, commit, source and sink log
entries, the writer lease) goes through ``create``, so of two writers exactly one writes each.

pyarrow's S3 file system does not offer the condition, so this module uses boto3 (present
wherever AWS is used; ``moto`` brings it in the tests) with the endpoint, region and
credentials of the checkpoint URI's query (``?endpoint_override=...&scheme=http``) or of the
usual AWS environment. Without boto3, or on another object store, ``conditional_writes`` says
``None`` and the callers fall back to check-then-write (logged when a query starts).
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from typing import Any

__all__ = ["S3ConditionalWrites", "conditional_writes"]

log = logging.getLogger(__name__)

_clients: dict[tuple[str, ...], Any] = {}
_clients_lock = threading.Lock()


class S3ConditionalWrites:
    """Conditional creates on one S3 endpoint. ``path`` arguments are pyarrow's ``bucket/key``."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def create(self, path: str, data: bytes) -> bool:
        """Create the object ``path`` with ``data`` unless an object of that key exists. ``True``
        when this call created it, ``False`` when it existed (or another writer's conditional
        create of the same key was in flight and won)."""
        from botocore.exceptions import ClientError

        bucket, _, key = path.partition("/")
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = exc.response.get("Error", {}).get("Code")
            # 412 PreconditionFailed: it exists; 409 ConditionalRequestConflict: a concurrent
            # conditional write of the key is under way, and S3 lets only one of them succeed
            if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True


    def put(self, path: str, data: bytes) -> None:
        """Write the object ``path`` whole (one PUT: readers see the old or the new bytes)."""
        bucket, _, key = path.partition("/")
        self.client.put_object(Bucket=bucket, Key=key, Body=data)


def _s3_client_options(root: str) -> dict[str, Any]:
    """boto3 client arguments from a pyarrow S3 URI's query (the same names pyarrow reads)."""
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(root).query))
    options: dict[str, Any] = {}
    endpoint = query.get("endpoint_override")
    if endpoint:
        scheme = query.get("scheme", "https")
        options["endpoint_url"] = endpoint if "://" in endpoint else f"{scheme}://{endpoint}"
    if query.get("region"):
        options["region_name"] = query["region"]
    if query.get("access_key"):
        options["aws_access_key_id"] = query["access_key"]
    if query.get("secret_key"):
        options["aws_secret_access_key"] = query["secret_key"]
    if query.get("session_token"):
        options["aws_session_token"] = query["session_token"]
    return options


def conditional_writes(root: str) -> S3ConditionalWrites | None:
    """The create-if-absent of the object store that ``root`` (a checkpoint URI) is on, or
    ``None`` where there is none to use (a local path, another scheme, boto3 missing)."""
    scheme = urllib.parse.urlsplit(root).scheme.lower()
    if scheme not in ("s3", "s3a"):
        return None
    try:
        import boto3
    except ImportError:
        return None
    options = _s3_client_options(root)
    key = tuple(f"{k}={v}" for k, v in sorted(options.items()))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = boto3.session.Session().client("s3", **options)
    return S3ConditionalWrites(client)

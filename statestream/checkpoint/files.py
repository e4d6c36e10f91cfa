"""CheckpointFileManager: every file statestream writes under a checkpoint goes through here.

Spark: ``CheckpointFileManager``. Writes are atomic: the bytes go to a hidden temporary file in the
same directory, which is renamed into place, so a reader never sees a partial file. The same code
serves a local directory, a shared POSIX mount (NFS) and any URI that ``pyarrow.fs`` understands
(``hdfs://``, ``s3://``, ``gs://``); this is what lets executors on other machines read and write
state.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from statestream.checkpoint.object_store import conditional_writes
from statestream.errors.checkpoint import FileAlreadyExistsError, checkpoint_location_not_directory_error

if TYPE_CHECKING:
    from statestream.checkpoint.object_store import S3ConditionalWrites

__all__ = ["CheckpointFileManager"]

T = TypeVar("T")



def _split_uri(root: str) -> tuple[pafs.FileSystem, str]:
    if "://" in root and not root.startswith("file://"):
        fs, path = pafs.FileSystem.from_uri(root)
        return fs, path
    if root.startswith("file:"):
        # file:///x and Hadoop's file:/x (what Spark's catalog gives as a table's location)
        root = root[len("file:") :]
        if root.startswith("//"):
            root = root[2:]
    return pafs.LocalFileSystem(), os.path.abspath(root)


@dataclass
class CheckpointFileManager:
    """File operations relative to one root (a checkpoint directory or URI).

    Paths given to the methods are relative to ``root`` (``"offsets/3"``) or absolute within it.
    Instances are cheap and picklable (they re-open the file system in each process).
    """

    root: str
    _fs: pafs.FileSystem | None = field(default=None, init=False, repr=False, compare=False)
    _base: str = field(default="", init=False, repr=False, compare=False)
    _conditional: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._fs, self._base = _split_uri(self.root)

    def __getstate__(self) -> dict:
        return {"root": self.root}

    def __setstate__(self, state: dict) -> None:
        self.root = state["root"]
        self._conditional = None
        self._fs, self._base = _split_uri(self.root)

    @property
    def fs(self) -> pafs.FileSystem:
        assert self._fs is not None
        return self._fs

    def path(self, rel: str = "") -> str:
        """The file system path of ``rel`` (for messages and for pyarrow calls)."""
        if not rel:
            return self._base
        return self._base.rstrip("/") + "/" + rel.lstrip("/")

    @property
    def remote(self) -> bool:
        """Whether the root is a URI of another file system than the local one."""
        return "://" in self.root and not self.root.startswith("file://")

    def uri(self, rel: str = "") -> str:
        """``rel`` as a location to root another manager at (or to hand to a component that
        makes one): a URI for a remote root, its query (``?endpoint_override=...``) kept after
        the path; a path otherwise."""
        if not self.remote:
            return self.path(rel)
        base, sep, query = self.root.partition("?")
        return base.rstrip("/") + ("/" + rel.strip("/") if rel else "") + sep + query

    def display(self, rel: str = "") -> str:
        """A path as a user should see it in an error message (a remote root's query, which may
        hold credentials, left out)."""
        if self.remote:
            return self.uri(rel).partition("?")[0]
        return self.path(rel)

    def child(self, rel: str) -> "CheckpointFileManager":
        """A manager rooted at a sub-directory."""
        return CheckpointFileManager(self.uri(rel))

    @property
    def conditional(self) -> "S3ConditionalWrites | None":
        """The object store's create-if-absent (``checkpoint.object_store``), when the root is
        on one that has it; ``None`` on a local or mounted directory, whose writes rename under
        the writer lock instead."""
        if not self.remote:
            return None
        if self._conditional is None:
            self._conditional = conditional_writes(self.root) or False
        return self._conditional or None

    def exists(self, rel: str = "") -> bool:
        info = self.fs.get_file_info(self.path(rel))
        return info.type != pafs.FileType.NotFound

    def mkdirs(self, rel: str = "") -> None:
        self.fs.create_dir(self.path(rel), recursive=True)

    def check_root_is_directory(self) -> None:
        """Refuse a root that is a file, or lies under one, with the texts of Hadoop's errors
        that Spark's ``start()`` fails with (a missing root is fine: it is created)."""
        path = self._base.rstrip("/") or "/"
        while True:
            info = self.fs.get_file_info(path)
            if info.type == pafs.FileType.File:
                is_root = path == self._base.rstrip("/")
                raise checkpoint_location_not_directory_error(self.display() if is_root else path, is_root)
            if info.type == pafs.FileType.Directory or "/" not in path.strip("/"):
                return
            path = path.rsplit("/", 1)[0] or "/"

    def list(self, rel: str = "") -> list[str]:
        """Names (not paths) of the entries of a directory; [] when it does not exist.
        Hidden temporary files (starting with '.') are left out."""
        p = self.path(rel)
        info = self.fs.get_file_info(p)
        if info.type != pafs.FileType.Directory:
            return []
        sel = pafs.FileSelector(p, allow_not_found=True, recursive=False)
        return sorted(i.base_name for i in self.fs.get_file_info(sel) if not i.base_name.startswith("."))

    def size(self, rel: str) -> int:
        return int(self.fs.get_file_info(self.path(rel)).size or 0)

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.path(rel)) as f:
            return f.read()

    def open_input(self, rel: str) -> pa.NativeFile:
        return self.fs.open_input_file(self.path(rel))

    def write_atomic(self, rel: str, data: bytes, overwrite: bool = True) -> None:
        """Write ``data`` to ``rel`` so that readers see either nothing/the old file or all of it.

        With ``overwrite=False`` an existing target raises ``FileAlreadyExistsError`` (Spark's
        metadata logs refuse to overwrite a batch entry)."""
        target = self.path(rel)
        if not overwrite and self.conditional is not None:
            # an object store: one conditional PUT is atomic, and exactly one writer creates
            if not self.conditional.create(target, data):
                raise FileAlreadyExistsError(self.display(rel))
            return
        self.write_atomic_from(rel, lambda out: out.write(data), overwrite)

    def write_atomic_from(self, rel: str, fill: Callable[[pa.NativeFile], T], overwrite: bool = True) -> T:
        """:meth:`write_atomic` of what ``fill`` writes to the output stream it is given (its
        result is returned): a large file is written a piece at a time, never whole in memory.

        On an object store the file is uploaded as ``fill`` writes, under a temporary name, and
        then moved into place; a write there that must not overwrite goes through
        :meth:`write_atomic`, whose conditional create is atomic."""
        if not overwrite and self.conditional is not None:
            raise ValueError(f"write_atomic_from cannot create {self.display(rel)} exactly once on an object store: use write_atomic")
        target = self.path(rel)
        parent = target.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        if not overwrite and self.exists(rel):
            raise FileAlreadyExistsError(self.display(rel))
        tmp = f"{parent}/.{target.rsplit('/', 1)[1]}.{uuid.uuid4().hex}.tmp"
        try:
            with self.fs.open_output_stream(tmp) as out:
                result = fill(out)
            if not overwrite and self.exists(rel):
                raise FileAlreadyExistsError(self.display(rel))
            self.fs.move(tmp, target)
            return result
        finally:
            try:
                if self.fs.get_file_info(tmp).type != pafs.FileType.NotFound:
                    self.fs.delete_file(tmp)
            except OSError:
                pass

    def delete(self, rel: str) -> None:
        """Delete a file or a directory tree; missing is fine (idempotent)."""
        p = self.path(rel)
        info = self.fs.get_file_info(p)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(p)
        elif info.type != pafs.FileType.NotFound:
            self.fs.delete_file(p)

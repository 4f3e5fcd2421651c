"""Hadoop FileSystem storage (``hdfs://``, ``viewfs://``, or ``file://`` on request).

Uses the JVM's ``org.apache.hadoop.fs.FileSystem``, the same API and
configuration (``HADOOP_CONF_DIR``) Spark uses. The JVM is the active
SparkContext's when there is one (driver), otherwise a bare gateway started
once per process (Airflow worker, Spark executor's Python worker: about 2 s).

Writes go to a local temp file and then ``copyFromLocalFile``, so file bytes
never cross the py4j socket. Create-if-absent is ``create(path,
overwrite=false)``, as DESIGN.md prescribes; HDFS's rename of a directory is
atomic.
"""

from __future__ import annotations

import os
import tempfile
import threading
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from .storage import RenamingStorage

_gateway_lock = threading.Lock()
_gateway = None


def hadoop_jvm():
    """(jvm, hadoop Configuration) for this process."""
    global _gateway
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is not None:
        return sc._jvm, sc._jsc.hadoopConfiguration()
    with _gateway_lock:
        if _gateway is None:
            from pyspark.java_gateway import launch_gateway

            _gateway = launch_gateway()
    return _gateway.jvm, _gateway.jvm.org.apache.hadoop.conf.Configuration()


def _java_class(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    return java.getClass().getName() if java is not None else ""


class HadoopStorage(RenamingStorage):
    kind = "hadoop"

    def __init__(self, jvm=None, conf=None):
        self._jvm, self._conf = (jvm, conf) if jvm is not None else hadoop_jvm()

    def _fs_path(self, path: str):
        p = self._jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(self._conf), p

    @contextmanager
    def open_write(self, path: str) -> Iterator[BinaryIO]:
        fd, tmp = tempfile.mkstemp(prefix="onceflow-", suffix=".parquet")
        try:
            with os.fdopen(fd, "wb") as out:
                yield out
            fs, dst = self._fs_path(path)
            src = self._jvm.org.apache.hadoop.fs.Path("file://" + tmp)
            fs.copyFromLocalFile(True, False, src, dst)  # delSrc, no overwrite
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def size(self, path: str) -> int | None:
        fs, p = self._fs_path(path)
        try:
            return int(fs.getFileStatus(p).getLen())
        except Exception as exc:
            if _java_class(exc) == "java.io.FileNotFoundException":
                return None
            raise

    def exists(self, path: str) -> bool:
        fs, p = self._fs_path(path)
        return bool(fs.exists(p))

    def list_dir(self, path: str) -> dict[str, int | None]:
        fs, p = self._fs_path(path)
        if not fs.exists(p):
            return {}
        return {
            st.getPath().getName(): (None if st.isDirectory() else int(st.getLen()))
            for st in fs.listStatus(p)
        }

    def read_bytes(self, path: str) -> bytes | None:
        fs, p = self._fs_path(path)
        try:
            stream = fs.open(p)
        except Exception as exc:
            if _java_class(exc) == "java.io.FileNotFoundException":
                return None
            raise
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def create_if_absent(self, path: str, data: bytes) -> bool:
        fs, p = self._fs_path(path)
        try:
            out = fs.create(p, False)
        except Exception as exc:
            if _java_class(exc) == "org.apache.hadoop.fs.FileAlreadyExistsException":
                return False
            raise
        try:
            out.write(bytearray(data))
            out.hsync()
        finally:
            out.close()
        return True

    def delete(self, path: str) -> None:
        fs, p = self._fs_path(path)
        fs.delete(p, False)

    def delete_tree(self, path: str) -> bool:
        fs, p = self._fs_path(path)
        return bool(fs.delete(p, True))

    def rename(self, src: str, dst: str) -> None:
        fs, source = self._fs_path(src)
        _, target = self._fs_path(dst)
        # Hadoop's rename moves src *into* an existing dst directory: refuse.
        if fs.exists(target):
            raise FileExistsError(f"cannot rename {src} to {dst}: it exists")
        fs.mkdirs(target.getParent())
        if not fs.rename(source, target):
            raise OSError(f"Hadoop FileSystem refused to rename {src} to {dst}")

    def is_transient(self, exc: BaseException) -> bool:
        return _java_class(exc) in ("java.net.ConnectException", "java.net.SocketTimeoutException")

"""Hadoop FileSystem storage (``hdfs://``, ``viewfs://``, or ``file://`` on request).

Uses the JVM's ``org.apache.hadoop.fs`` API with the configuration Spark uses
(``HADOOP_CONF_DIR``). The JVM is the active SparkContext's when there is one
(driver), otherwise a bare gateway started once per process (Airflow worker,
Spark executor's Python worker: about 2 s).

Create-if-absent writes the whole file under a temp name, then
``FileContext.rename(tmp, final, Rename.NONE)``, which refuses an existing
destination: one atomic NameNode operation on HDFS. ``FileSystem.create(final,
overwrite=false)`` alone is not enough: on HDFS the name appears at create
time and the bytes at close, so a writer that dies in between leaves a
truncated file that looks like a decision. Hadoop's *local* filesystem
checks, then renames (not atomic across processes): ``storage_for`` serves
local paths with ``LocalStorage``.

Large writes go to a local temp file, then ``copyFromLocalFile``, so file
bytes never cross the py4j socket.
"""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from onceflow.storage.base import TMP_PREFIX, RenamingStorage

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


# Worth a retry later: the NameNode (or a DataNode) cannot be reached or went away mid-call, is
# read-only for now (safe mode, while it starts), or an HA pair is failing over.
TRANSIENT = frozenset({
    "java.net.SocketException",  # refused, reset, no route: ConnectException and its kind
    "java.net.SocketTimeoutException",
    "java.io.EOFException",  # the connection closed mid-call: a NameNode that just died
    "org.apache.hadoop.hdfs.server.namenode.SafeModeException",
    "org.apache.hadoop.ipc.RetriableException",
    "org.apache.hadoop.ipc.StandbyException",
})


def java_class(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    return java.getClass().getName() if java is not None else ""


def java_lineage(exc: BaseException) -> list[str]:
    """The Java exception's class and its superclasses; for an error a Hadoop server sent back
    (``RemoteException``), the server's class."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return []
    if java.getClass().getName() == "org.apache.hadoop.ipc.RemoteException":
        return [java.getClassName()]
    names, cls = [], java.getClass()
    while cls is not None:
        names.append(cls.getName())
        cls = cls.getSuperclass()
    return names


def java_message(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    return f"{java.getClass().getName()}: {java.getMessage()}" if java is not None else str(exc)


class HadoopStorage(RenamingStorage):
    kind = "hadoop"

    def __init__(self, jvm=None, conf=None):
        self._jvm, self._conf = (jvm, conf) if jvm is not None else hadoop_jvm()
        hfs = self._jvm.org.apache.hadoop.fs
        self._rename_options = {}
        for mode in ("NONE", "OVERWRITE"):
            options = self._jvm.java.lang.reflect.Array.newInstance(
                self._jvm.java.lang.Class.forName("org.apache.hadoop.fs.Options$Rename"), 1
            )
            self._jvm.java.lang.reflect.Array.set(options, 0, getattr(hfs.Options.Rename, mode))
            self._rename_options[mode] = options

    def __repr__(self) -> str:
        return "HadoopStorage()"

    def _fs_path(self, path: str):
        p = self._jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(self._conf), p

    @contextmanager
    def open_write(self, path: str) -> Iterator[BinaryIO]:
        fd, tmp = tempfile.mkstemp(prefix="onceflow-")
        try:
            with os.fdopen(fd, "wb") as out:
                yield out
            fs, dst = self._fs_path(path)
            src = self._jvm.org.apache.hadoop.fs.Path("file://" + tmp)
            fs.copyFromLocalFile(True, False, src, dst)  # delSrc, no overwrite
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def read_bytes(self, path: str) -> bytes | None:
        fs, p = self._fs_path(path)
        try:
            stream = fs.open(p)
        except Exception as exc:
            if java_class(exc) == "java.io.FileNotFoundException":
                return None
            raise
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def size(self, path: str) -> int | None:
        fs, p = self._fs_path(path)
        try:
            return int(fs.getFileStatus(p).getLen())
        except Exception as exc:
            if java_class(exc) == "java.io.FileNotFoundException":
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

    def list_tree(self, path: str) -> list[str]:
        fs, p = self._fs_path(path)
        if not fs.exists(p):
            return []
        base = fs.makeQualified(p).toUri().getPath().rstrip("/") + "/"
        names: list[str] = []
        files = fs.listFiles(p, True)
        while files.hasNext():
            found = files.next().getPath()
            if not found.getName().startswith((TMP_PREFIX, ".")):
                names.append(found.toUri().getPath()[len(base):])
        return sorted(names)

    def _write_then_rename(self, path: str, data: bytes, mode: str) -> bool:
        fs, final = self._fs_path(path)
        tmp = self._jvm.org.apache.hadoop.fs.Path(final.getParent(), f"{TMP_PREFIX}{final.getName()}-{uuid.uuid4().hex}")
        out = fs.create(tmp, True)
        try:
            out.write(bytearray(data))
            out.hsync()
        finally:
            out.close()
        try:
            context = self._jvm.org.apache.hadoop.fs.FileContext.getFileContext(fs.getUri(), self._conf)
            context.rename(tmp, final, self._rename_options[mode])
            return True
        except Exception as exc:
            if java_class(exc) == "org.apache.hadoop.fs.FileAlreadyExistsException":
                return False
            raise
        finally:
            fs.delete(tmp, False)

    def create_if_absent(self, path: str, data: bytes) -> bool:
        return self._write_then_rename(path, data, "NONE")

    def replace(self, path: str, data: bytes) -> None:
        self._write_then_rename(path, data, "OVERWRITE")

    def delete(self, path: str) -> None:
        fs, p = self._fs_path(path)
        fs.delete(p, False)

    def delete_tree(self, path: str) -> bool:
        fs, p = self._fs_path(path)
        return bool(fs.delete(p, True))

    def rename(self, src: str, dst: str) -> None:
        fs, source = self._fs_path(src)
        _, target = self._fs_path(dst)
        fs.mkdirs(target.getParent())
        # FileSystem.rename would move src *into* an existing dst directory; FileContext's
        # rename with Rename.NONE refuses an existing dst in the same atomic step.
        try:
            self._jvm.org.apache.hadoop.fs.FileContext.getFileContext(fs.getUri(), self._conf).rename(
                source, target, self._rename_options["NONE"])
        except Exception as exc:
            if java_class(exc) == "org.apache.hadoop.fs.FileAlreadyExistsException":
                raise FileExistsError(f"cannot rename {src} to {dst}: it exists") from None
            raise

    def is_transient(self, exc: BaseException) -> bool:
        return not TRANSIENT.isdisjoint(java_lineage(exc))

    def explain(self, exc: BaseException) -> str:
        return (
            f"{java_message(exc)}. Check that the filesystem is reachable, out of safe mode and writable by this "
            "user, and that the cluster's core-site.xml/hdfs-site.xml are on the classpath (HADOOP_CONF_DIR), then "
            "retry the task"
        )

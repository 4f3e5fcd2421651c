"""Ledger storage on any Hadoop FileSystem (hdfs://, viewfs://, file://, ...).

Runs in whatever process holds a JVM: the Spark driver (through the
SparkSession), or an Airflow worker through a gateway from
``pyspark.java_gateway.launch_gateway()``.

create-if-absent = write the whole record to a hidden temp file, then
``FileContext.rename(tmp, final, Rename.NONE)``, which refuses an existing
destination. On HDFS that rename is one atomic NameNode operation. We do not
use ``FileSystem.create(final, overwrite=false)`` alone, although it also
refuses an existing file: on HDFS the name appears at create time and the
bytes at close, so a writer that dies in between leaves a truncated record
that looks like a decision. With the rename, a crash leaves only a temp file.

On file:// Hadoop's local filesystem checks-then-renames (not atomic across
processes); ``open_ledger_storage`` therefore uses ``LocalLedgerStorage`` for
local paths, and this class on file:// is for tests of the Hadoop code path.
"""

from __future__ import annotations

import uuid
from typing import Any

from .errors import LedgerUnavailable
from .storage import check_key

_TMP_PREFIX = ".tmp-"


def _jvm_of(spark: Any):
    """(jvm, hadoop Configuration) from a SparkSession, a JavaGateway or a JVMView."""
    if spark is None:
        from pyspark.java_gateway import launch_gateway

        spark = launch_gateway()
    if hasattr(spark, "sparkContext"):  # SparkSession
        sc = spark.sparkContext
        return sc._jvm, sc._jsc.hadoopConfiguration()
    jvm = getattr(spark, "jvm", spark)  # JavaGateway -> JVMView
    return jvm, jvm.org.apache.hadoop.conf.Configuration()


class HadoopLedgerStorage:
    def __init__(self, root_uri: str, spark: Any = None):
        self.root_uri = root_uri.rstrip("/")
        self._jvm, conf = _jvm_of(spark)
        hfs = self._jvm.org.apache.hadoop.fs
        self._root = hfs.Path(self.root_uri)
        try:
            uri = self._root.toUri()
            self._fs = hfs.FileSystem.get(uri, conf)
            self._fc = hfs.FileContext.getFileContext(uri, conf)
        except Exception as exc:  # py4j wraps the Java exception
            raise LedgerUnavailable(
                f"cannot open the Hadoop filesystem for ledger root {self.root_uri}: {_java_message(exc)}. "
                "Check the URI and that the cluster's core-site.xml/hdfs-site.xml are on the classpath."
            ) from exc
        rename = self._jvm.java.lang.Class.forName("org.apache.hadoop.fs.Options$Rename")
        self._no_overwrite = self._jvm.java.lang.reflect.Array.newInstance(rename, 1)
        self._jvm.java.lang.reflect.Array.set(self._no_overwrite, 0, hfs.Options.Rename.NONE)

    def __repr__(self) -> str:
        return f"HadoopLedgerStorage({self.root_uri!r})"

    def describe(self, key: str) -> str:
        return f"{self.root_uri}/{key}"

    def _path(self, key: str):
        return self._jvm.org.apache.hadoop.fs.Path(self._root, check_key(key))

    def _unavailable(self, key: str, exc: Exception) -> LedgerUnavailable:
        return LedgerUnavailable(
            f"ledger storage unusable at {self.describe(key)}: {_java_message(exc)}. "
            "Check that the filesystem is reachable and writable by this user, then retry the task."
        )

    def _write(self, path, data: bytes) -> None:
        out = self._fs.create(path, True)
        try:
            out.write(bytearray(data))
            out.hsync()
        finally:
            out.close()

    def create(self, key: str, data: bytes) -> bool:
        final = self._path(key)
        tmp = self._jvm.org.apache.hadoop.fs.Path(final.getParent(), f"{_TMP_PREFIX}{final.getName()}-{uuid.uuid4().hex}")
        try:
            self._write(tmp, data)
            try:
                self._fc.rename(tmp, final, self._no_overwrite)
                return True
            except Exception as exc:
                if _java_class(exc) == "org.apache.hadoop.fs.FileAlreadyExistsException":
                    return False
                raise
            finally:
                self._fs.delete(tmp, False)
        except Exception as exc:
            raise self._unavailable(key, exc) from exc

    def read(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            stream = self._fs.open(path)
        except Exception as exc:
            if _java_class(exc) == "java.io.FileNotFoundException":
                return None
            raise self._unavailable(key, exc) from exc
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        except Exception as exc:
            raise self._unavailable(key, exc) from exc
        finally:
            stream.close()
        return bytes(data)

    def overwrite(self, key: str, data: bytes) -> None:
        final = self._path(key)
        tmp = self._jvm.org.apache.hadoop.fs.Path(final.getParent(), f"{_TMP_PREFIX}{final.getName()}-{uuid.uuid4().hex}")
        overwrite = self._jvm.java.lang.reflect.Array.newInstance(
            self._jvm.java.lang.Class.forName("org.apache.hadoop.fs.Options$Rename"), 1
        )
        self._jvm.java.lang.reflect.Array.set(overwrite, 0, self._jvm.org.apache.hadoop.fs.Options.Rename.OVERWRITE)
        try:
            self._write(tmp, data)
            self._fc.rename(tmp, final, overwrite)
        except Exception as exc:
            raise self._unavailable(key, exc) from exc

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix.rstrip("/")) if prefix else self._root
        root = self._fs.makeQualified(self._root).toUri().getPath().rstrip("/") + "/"
        keys: list[str] = []
        try:
            if not self._fs.exists(base):
                return []
            files = self._fs.listFiles(base, True)
            while files.hasNext():
                path = files.next().getPath()
                if path.getName().startswith(_TMP_PREFIX) or path.getName().startswith("."):
                    continue
                keys.append(path.toUri().getPath()[len(root):])
        except Exception as exc:
            raise self._unavailable(prefix, exc) from exc
        return sorted(keys)


def _java_class(exc: Exception) -> str:
    java = getattr(exc, "java_exception", None)
    return java.getClass().getName() if java is not None else type(exc).__name__


def _java_message(exc: Exception) -> str:
    java = getattr(exc, "java_exception", None)
    return f"{java.getClass().getName()}: {java.getMessage()}" if java is not None else str(exc)

"""Is PySpark whole in this environment? ``python -m onceflow_devkit.pyspark_files`` (standard library only,
so it also runs as a file in an environment without the dev kit).

The Spark provider depends on ``pyspark-client``, which installs into PySpark's own ``pyspark/`` folder.
At one version of both, every file they share is the same bytes, so whichever pip installs last leaves
PySpark whole; at different versions the later one overwrites part of the other. Exit 1, naming the
files, when a file ``pyspark-client`` installed differs from what its record says, or the versions differ.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import sys
from importlib import metadata


def broken_files() -> list[str]:
    """Problems found in this environment (none when pyspark-client is not installed)."""
    try:
        client = metadata.distribution("pyspark-client")
    except metadata.PackageNotFoundError:
        return []  # PySpark alone: nothing shares its folder
    return differences(client, metadata.version("pyspark"))


def differences(client: metadata.Distribution, pyspark_version: str) -> list[str]:
    """A version mismatch, and the files of ``client``'s record that are not as recorded."""
    problems = [] if client.version == pyspark_version else [
        f"pyspark {pyspark_version} beside pyspark-client {client.version}: pin one version of both"]
    for path, digest, _size in csv.reader((client.read_text("RECORD") or "").splitlines()):
        if not digest or ".dist-info/" in path:
            continue
        algorithm, expected = digest.split("=", 1)
        file = client.locate_file(path)
        actual = base64.urlsafe_b64encode(hashlib.new(algorithm, file.read_bytes()).digest()) if file.exists() else b""
        if actual.rstrip(b"=").decode() != expected:
            problems.append(f"{path} is not the file pyspark-client {client.version} installed")
    return problems


if __name__ == "__main__":
    found = broken_files()
    for problem in found[:20]:
        print(f"pyspark_files: {problem}", file=sys.stderr)
    import pyspark  # noqa: F401  (the import itself is part of the check)

    sys.exit(1 if found else 0)

"""The check that PySpark is whole beside pyspark-client (tools/bootstrap.sh runs it on .venv), on a
made-up installation: a record, and the files as pip would have left them."""

from __future__ import annotations

import base64
import hashlib
from importlib import metadata

from onceflow_devkit.pyspark_files import differences


def installed(tmp_path, version: str, files: dict[str, bytes], on_disk: dict[str, bytes]) -> metadata.Distribution:
    """pyspark-client ``version`` whose record lists ``files``; the folder holds ``on_disk``."""
    info = tmp_path / f"pyspark_client-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pyspark-client\nVersion: {version}\n")
    rows = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
            for path, data in files.items()]
    (info / "RECORD").write_text("\n".join([*rows, f"{info.name}/RECORD,,"]) + "\n")
    for path, data in on_disk.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    return metadata.PathDistribution(info)


def test_the_same_version_with_the_recorded_files_is_whole(tmp_path):
    files = {"pyspark/sql/connect/session.py": b"one", "pyspark/version.py": b"__version__ = '4.2.0'"}
    assert differences(installed(tmp_path, "4.2.0", files, files), "4.2.0") == []


def test_a_file_pyspark_overwrote_with_other_bytes_or_deleted_is_named(tmp_path):
    files = {"pyspark/sql/connect/session.py": b"client's", "pyspark/version.py": b"v", "pyspark/gone.py": b"x"}
    client = installed(tmp_path, "4.2.0", files, {**files, "pyspark/sql/connect/session.py": b"pyspark's"})
    (tmp_path / "pyspark/gone.py").unlink()

    assert differences(client, "4.2.0") == [
        "pyspark/sql/connect/session.py is not the file pyspark-client 4.2.0 installed",
        "pyspark/gone.py is not the file pyspark-client 4.2.0 installed",
    ]


def test_two_versions_are_refused_naming_both(tmp_path):
    problems = differences(installed(tmp_path, "4.2.0", {}, {}), "4.3.0")
    assert problems == ["pyspark 4.3.0 beside pyspark-client 4.2.0: pin one version of both"]

"""Services that run from jars Maven fetches (Apache Kafka, HDFS): the fetch and a small JVM's options.

A service names its jars in ``devkit/<service>/pom.xml``; Maven copies them once into
``~/.cache/onceflow/<name>/libs`` (``$ONCEFLOW_JAR_CACHE`` overrides the root; the older
``$ONCEFLOW_KAFKA_CACHE`` still does), outside the repository, so ``make clean`` keeps them.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping, TypeVar

from onceflow_devkit.services.process import ServiceError

T = TypeVar("T")

DEVKIT = Path(__file__).resolve().parents[2]
INSTALL_HINT = "install Maven and a JDK 17+ (Debian/Ubuntu: apt-get install maven openjdk-17-jdk-headless)"
# Serial GC and the C1 compiler only: a service JVM starts in seconds on 2 cores. The heap is each caller's.
SMALL_JVM = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m", "-Djava.awt.headless=true",
             "-XX:+ExitOnOutOfMemoryError"]


def cache_root() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "onceflow"
    return Path(os.environ.get("ONCEFLOW_JAR_CACHE") or os.environ.get("ONCEFLOW_KAFKA_CACHE") or default)


def require_tools(what: str, install_hint: str, *tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            raise ServiceError(f"{what} runs from jars that Maven fetches, and `{tool}` is not on PATH: {install_hint}")


def made_once(home: Path, found: Callable[[], T | None], make: Callable[[], T]) -> T:
    """What ``found`` finds under ``home``, else what ``make`` makes there, under ``home``'s lock so that
    two sessions never make it at once. ``make`` writes last the stamp ``found`` looks for: a make that
    died half way is made again."""
    hit = found()
    if hit is not None:
        return hit
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        hit = found()
        return hit if hit is not None else make()


def fetch_jars(name: str, pom: Path, properties: Mapping[str, str], expect: str, what: str, install_hint: str,
               prepare: Callable[[Path], None] | None = None) -> Path:
    """The directory of the jars ``pom`` names (with ``-D`` ``properties``), fetched by Maven into
    ``<cache>/<name>/libs`` on first use. ``expect`` is a jar name pattern a good fetch holds;
    ``prepare`` runs on the fetched directory before it is published. A stamp file says a fetch
    completed (``made_once``)."""
    home = cache_root() / name
    libs, stamp = home / "libs", home / "fetched"

    def fetch() -> Path:
        require_tools(what, install_hint, "mvn", "java")
        staging = Path(tempfile.mkdtemp(prefix="libs-", dir=home))
        argv = ["mvn", "-q", "-B", "-f", str(pom), *(f"-D{k}={v}" for k, v in properties.items()),
                "dependency:copy-dependencies", f"-DoutputDirectory={staging}"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
            if done.returncode != 0 or not any(staging.glob(expect)):
                raise ServiceError(f"Maven could not fetch {what} (`{' '.join(argv)}`):\n"
                                   f"{(done.stdout + done.stderr)[-3000:]}")
            if prepare is not None:
                prepare(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        stamp.write_text(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {len(list(libs.glob('*.jar')))} jars\n")
        return libs

    return made_once(home, lambda: libs if stamp.exists() else None, fetch)

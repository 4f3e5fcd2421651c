#!/usr/bin/env bash
# Create or update .venv so that it matches requirements.txt exactly.
#
# Idempotent and quick on a second run: the install runs only when
# requirements.txt, constraints.txt or a pyproject.toml changed since the last
# successful install (a hash of them is kept in .venv/.onceflow-installed).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "onceflow setup: $*" >&2; exit 1; }

# .venv lives in the checkout, and PySpark's spark-submit there runs its Python's path unquoted
# (find-spark-home: $PYSPARK_DRIVER_PYTHON): at a space it finds no Spark, so every batch would fail.
case "$PWD" in
  *[[:space:]]*) fail "the checkout's path '$PWD' has a space in it: PySpark's spark-submit, installed in .venv here, splits its Python's path at spaces and then finds no Spark. Clone or move the checkout to a path without spaces." ;;
esac

# Java 17+ is what PySpark 4.x runs on; check before spending a minute on pip.
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  fail "Java 17 or newer is required by Spark and was not found. Install a JDK 17+ (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless) or set JAVA_HOME."
fi
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
java_version=$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
java_major=${java_version%%.*}
[ "$java_major" = "1" ] && java_major=$(echo "$java_version" | cut -d. -f2)
if ! [ "${java_major:-0}" -ge 17 ] 2>/dev/null; then
  fail "Java 17 or newer is required by Spark; found '$java_version' at $(command -v "$java_bin"). Install a JDK 17+ or point JAVA_HOME at one."
fi

PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || fail "Python 3.10+ is required; '$PYTHON' is $("$PYTHON" --version 2>&1). Set PYTHON=/path/to/python3.11."

# A Debian package, installed when we may (root with apt-get): 0 when it is there afterwards.
apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  echo "onceflow setup: installing $1 (Debian package) $2"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1"; } >/dev/null 2>&1
}

# The UI test drives Debian's Chromium with Playwright (whose own browser
# download cannot run here). Installed when we may; otherwise that test skips
# and names the missing binary.
if ! command -v chromium >/dev/null 2>&1; then
  apt_install chromium "for the UI browser test" \
    || echo "onceflow setup: chromium could not be installed (apt-get install chromium, as root); the UI browser test will skip" >&2
fi

# Apache Kafka, the broker the demo and the tests run on, HDFS (a NameNode and a DataNode, for
# the tests of Hadoop storage) and Iceberg's REST catalog come from Maven Central as jars
# (devkit/kafka/pom.xml, devkit/hdfs/pom.xml, devkit/iceberg-rest/pom.xml; cached in
# ~/.cache/onceflow, fetched below once).
if ! command -v mvn >/dev/null 2>&1; then
  apt_install maven "to fetch Apache Kafka's and HDFS's jars" \
    || fail "Maven (mvn) fetches Apache Kafka's and HDFS's jars and could not be installed. Install it (apt-get install maven), or run on a compatible broker: ONCEFLOW_TEST_BROKERS=noida make test, onceflow demo --broker noida"
fi

# PostgreSQL (Airflow's metadata database, and the example postgres sink's two-phase commit) is
# Debian's package; the dev kit starts a cluster of its own from its binaries.
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && [ -z "${ONCEFLOW_POSTGRES_BIN:-}" ]; then
  apt_install postgresql "for the postgres sink's tests" \
    || fail "PostgreSQL's server was not found and could not be installed. Install it (apt-get install postgresql) or set ONCEFLOW_POSTGRES_BIN to its bin directory"
fi

# Redis, the Celery executor's broker in the dev kit, is Debian's package; the dev kit starts its own.
if ! command -v redis-server >/dev/null 2>&1; then
  apt_install redis-server "for the Celery executor's tests" \
    || fail "redis-server was not found and could not be installed. Install it (apt-get install redis-server)"
fi

fetch_jars() {
  .venv/bin/python -m onceflow_devkit.services.apache_kafka >/dev/null || fail "fetching Apache Kafka's jars with Maven failed (see above)"
  .venv/bin/python -m onceflow_devkit.services.hdfs >/dev/null || fail "fetching HDFS's jars with Maven failed (see above)"
  .venv/bin/python -m onceflow_devkit.services.rest_catalog >/dev/null || fail "fetching the Iceberg REST catalog's jars with Maven failed (see above)"
}

stamp=.venv/.onceflow-installed
want=$(cat requirements.txt constraints.txt pyproject.toml devkit/pyproject.toml examples/pyproject.toml examples/postgres_sink/pyproject.toml examples/sqlite_sink/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv/bin/onceflow ]; then
  fetch_jars
  exit 0
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
echo "onceflow setup: installing pinned dependencies into .venv (first run: a few minutes)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt -c constraints.txt
# The library, its examples, the example sink kinds (packages of their own, as a user's would be)
# and the dev kit, editable: one direction of imports.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e . -e examples -e examples/postgres_sink \
  -e examples/sqlite_sink -e devkit
# pyspark and the Spark provider's pyspark-client share the pyspark/ folder: at one version the files
# both install are the same bytes, so neither breaks the other (never uninstall pyspark-client: that
# deletes files PySpark needs).
.venv/bin/python -m onceflow_devkit.pyspark_files \
  || fail "PySpark in .venv is broken (see above); remove .venv and run again."
echo "$want" > "$stamp"
fetch_jars
echo "onceflow setup: .venv is ready"

"""The embedded stack starts, reports, survives stale state and stops by PID."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import uuid

import pytest

from onceflow_devkit.services.process import ManagedProcess, pick_port, port_is_free
from onceflow_devkit.services.stack import EmbeddedStack
from tests.conftest import TEST_HOME

ONCEFLOW = str(Path(sys.executable).parent / "onceflow")


def _cli(home: Path, *args: str, timeout: float = 120, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ONCEFLOW_HOME": str(home)}
    for var in ("ONCEFLOW_KAFKA_BOOTSTRAP", "ONCEFLOW_S3_ENDPOINT"):
        env.pop(var, None)
    env.update(extra_env or {})
    return subprocess.run([ONCEFLOW, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def stack_home():
    # Not under pytest's tmp_path: its root is closed to other users, and PostgreSQL runs as user postgres.
    home = TEST_HOME / f"stack-{uuid.uuid4().hex[:6]}"
    yield home
    EmbeddedStack(home).down()


def test_cli_up_status_down_round_trip(stack_home):
    up = _cli(stack_home, "services", "up")
    assert up.returncode == 0, up.stderr
    status = _cli(stack_home, "services", "status", "--json")
    assert status.returncode == 0
    rows = {r["service"]: r for r in json.loads(status.stdout)}
    assert rows["s3"]["pid"] and rows["kafka"]["pid"] and rows["postgres"]["pid"]
    # The broker really listens where stack.json says it does.
    info = json.loads((stack_home / "stack.json").read_text())
    host, port = info["kafka"]["bootstrap"].split(":")
    socket.create_connection((host, int(port)), timeout=5).close()

    # Nothing falls back to a running stack: `services up` writes the settings
    # that point at it into a file only its owner can read, and says so.
    env_file = stack_home / "stack.env"
    assert f". {env_file};" in up.stdout
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((stack_home / "stack.json").stat().st_mode) == 0o600  # it holds the services' keys
    settings = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert settings["ONCEFLOW_KAFKA_BOOTSTRAP"] == info["kafka"]["bootstrap"]
    assert settings["ONCEFLOW_S3_ENDPOINT"] == info["s3"]["endpoint_url"]
    without = _cli(stack_home, "status", "--pipeline", "clickstream", "--spec", "onceflow_examples.clickstream:CLICKSTREAM",
                   "--warehouse", f"file://{stack_home}/warehouse")
    assert without.returncode == 2 and "ONCEFLOW_KAFKA_BOOTSTRAP is not set" in without.stderr
    with_settings = _cli(stack_home, "status", "--pipeline", "clickstream", "--spec", "onceflow_examples.clickstream:CLICKSTREAM",
                         "--warehouse", f"file://{stack_home}/warehouse", extra_env=settings)
    assert with_settings.returncode == 0 and "no batches yet" in with_settings.stdout, with_settings.stderr

    again = _cli(stack_home, "services", "up")  # idempotent: nothing restarts
    assert again.returncode == 0
    assert json.loads(_cli(stack_home, "services", "status", "--json").stdout) == list(rows.values())

    down = _cli(stack_home, "services", "down")
    assert down.returncode == 0 and all(name in down.stdout for name in ("kafka", "s3", "postgres"))
    for row in rows.values():
        assert not Path(f"/proc/{row['pid']}").exists() or _is_zombie(row["pid"])
    assert _cli(stack_home, "services", "status").returncode == 3


def test_up_after_kill_9_replaces_the_dead_broker(stack_home):
    stack = EmbeddedStack(stack_home)
    first = stack.up()
    os.killpg(stack.kafka_proc.running_pid(), signal.SIGKILL)
    _wait_gone(stack.kafka_proc)
    assert stack.info() is None  # half-up is reported as down
    second = stack.up()
    assert second.kafka.name == first.kafka.name
    assert stack.kafka_proc.running_pid() is not None


def test_stale_pid_file_naming_an_unrelated_process_is_ignored_and_that_process_lives(tmp_path):
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        proc = ManagedProcess("kafka", tmp_path / "kafka")
        proc.directory.mkdir(parents=True)
        proc.pid_file.write_text(f"{bystander.pid}\n")
        assert proc.running_pid() is None
        assert not proc.pid_file.exists()
        assert proc.stop() is False
        assert bystander.poll() is None  # never kill a process we did not start
    finally:
        bystander.kill()
        bystander.wait()


def test_pid_file_of_a_dead_process_is_stale(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    proc = ManagedProcess("s3", tmp_path / "s3")
    proc.directory.mkdir(parents=True)
    proc.pid_file.write_text(f"{dead.pid}\n")
    assert proc.running_pid() is None


def test_taken_default_port_falls_back_to_a_free_one():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        assert not port_is_free(taken)
        chosen = pick_port(taken)
        assert chosen != taken and port_is_free(chosen)


def test_broker_that_cannot_start_reports_its_log(tmp_path):
    from onceflow_devkit.services.process import ServiceError

    proc = ManagedProcess("broken", tmp_path / "broken")
    with pytest.raises(ServiceError, match="(?s)exited with code 3.*boom"):
        proc.start(["sh", "-c", "echo boom; exit 3"], port=1, ready=lambda: False, timeout=10)


def _answers(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def test_a_port_answered_by_another_process_is_not_taken_for_the_service(tmp_path):
    """Two stacks starting at once may pick the same port: the loser must not use the winner's service."""
    from onceflow_devkit.services.process import ServiceError

    with socket.socket() as other_stack:
        other_stack.bind(("127.0.0.1", 0))
        other_stack.listen()
        port = other_stack.getsockname()[1]
        loser = ManagedProcess("broker", tmp_path / "broker")
        with pytest.raises(ServiceError, match="not from the process just started"):
            loser.start(["sleep", "30"], port=port, ready=lambda: _answers(port), timeout=10)
        assert loser.running_pid() is None


def test_a_service_listening_on_its_port_is_ready(tmp_path):
    port = pick_port(None)
    listener = f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(30)"
    proc = ManagedProcess("listener", tmp_path / "listener")
    pid = proc.start([sys.executable, "-c", listener], port=port, ready=lambda: _answers(port), timeout=10)
    try:
        assert proc.running_pid() == pid
    finally:
        proc.stop()


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(proc: ManagedProcess, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while proc.running_pid() is not None and time.monotonic() < deadline:
        time.sleep(0.1)


def test_a_run_killed_half_way_leaves_nothing_that_breaks_the_next(tmp_path):
    """SIGKILL a process that started services the way the fixtures do; the
    services die with it, and the next start in the same place succeeds."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from onceflow_devkit.services.process import ManagedProcess\n"
        "from onceflow_devkit.services.s3 import start_moto\n"
        f"proc = ManagedProcess('s3', Path({str(tmp_path)!r}) / 's3').reset()\n"
        "start_moto(proc, die_with_parent=True)\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    runner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert runner.stdout.readline().strip() == "up"
    proc = ManagedProcess("s3", tmp_path / "s3")
    orphan = proc.running_pid()
    assert orphan is not None
    runner.kill()
    runner.wait()
    _wait_gone(proc)
    assert proc.running_pid() is None, "the service outlived the killed run"
    assert proc.pid_file.exists() is False  # the stale PID file was recognised and removed

    from onceflow_devkit.services.s3 import start_moto

    endpoint = start_moto(proc.reset(), die_with_parent=True)
    try:
        assert endpoint.client().list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200
    finally:
        proc.stop()


def test_a_stack_run_beside_others_keeps_off_the_usual_ports_and_its_restarted_broker_keeps_its_own(stack_home):
    """Chaos runs side by side: one run's broker restarts on its old port while another run's
    stack starts. On the usual ports (9092, 9000) the starting stack found 9092 free and took it."""
    from onceflow_devkit.services.kafka_broker import DEFAULT_PORT as KAFKA_PORT
    from onceflow_devkit.services.s3 import DEFAULT_PORT as S3_PORT

    stack = EmbeddedStack(stack_home, usual_ports=False)
    info = stack.up()
    kafka_port = int(info.kafka.bootstrap.rsplit(":", 1)[1])
    assert kafka_port != KAFKA_PORT and not info.s3.endpoint_url.endswith(f":{S3_PORT}")
    restarted = stack.restart_broker()
    assert restarted.bootstrap == info.kafka.bootstrap
    socket.create_connection(("127.0.0.1", kafka_port), timeout=5).close()


def test_a_cluster_stack_reports_its_three_nodes_and_starts_again_the_one_that_died(stack_home):
    # What the chaos runs on Apache Kafka lean on: the stack of --broker apache-cluster.
    stack = EmbeddedStack(stack_home, die_with_parent=True, usual_ports=False)
    info = stack.up(broker="apache-cluster")
    cluster = stack.cluster()

    assert info.kafka.name == "apache-cluster" and len(info.kafka.bootstrap.split(",")) == 3
    assert sorted(cluster.running()) == [0, 1, 2] and len(stack.kafka_pids()) == 3
    assert [row["service"] for row in stack.status()] == ["s3", "kafka-1", "kafka-2", "kafka-3", "postgres"]
    leader = cluster.active_controller()
    cluster.kill(leader)

    assert stack.dead_kafka_nodes() == [leader] and stack.info() is None  # partly down
    stack.revive_kafka()
    assert stack.dead_kafka_nodes() == [] and stack.info() == info
    assert cluster.active_controller() in (0, 1, 2)
    assert sorted(stack.down()) == ["kafka-1", "kafka-2", "kafka-3", "postgres", "s3"]

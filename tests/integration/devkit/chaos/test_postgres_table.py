"""What the chaos run's --postgres relies on, on a real PostgreSQL: a crashed server keeps the
transactions prepared before the crash, the connection killer ends every other client but its own,
and the audit's plain-SQL reading of the table counts every duplicate and every missing row."""

from __future__ import annotations

import uuid

import pytest

import psycopg

from onceflow_devkit.audit.clickstream_audit import audit_table_rows
from onceflow_devkit.chaos.injectors import terminate_other_clients
from onceflow_devkit.services.postgres import RestartablePostgres
from onceflow_devkit.services.process import ManagedProcess
from tests.conftest import TEST_HOME


@pytest.fixture
def restartable():
    server = RestartablePostgres(ManagedProcess("postgres-table", TEST_HOME / f"postgres-table-{uuid.uuid4().hex[:6]}"))
    server.start()
    yield server
    server.stop()


def test_a_crashed_server_comes_back_on_its_port_with_its_prepared_transactions(restartable):
    with restartable.server.connect(autocommit=True) as conn:
        conn.execute("CREATE TABLE t (v int)")
    conn = restartable.server.connect()
    conn.tpc_begin("onceflow:p:t:b1:s0:a1.0")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.tpc_prepare()
    conn.close()
    port = restartable.server.port

    assert restartable.crash()
    restartable.start()

    assert restartable.server.port == port
    with restartable.server.connect(autocommit=True) as conn:
        assert [x.gtrid for x in conn.tpc_recover()] == ["onceflow:p:t:b1:s0:a1.0"]
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)  # prepared, not committed
        conn.tpc_commit("onceflow:p:t:b1:s0:a1.0")
        assert conn.execute("SELECT v FROM t").fetchall() == [(1,)]


def test_the_connection_killer_ends_every_other_client_and_keeps_its_own(restartable):
    victims = [restartable.server.connect(autocommit=True) for _ in range(3)]
    with restartable.server.connect(autocommit=True) as killer:
        terminated = terminate_other_clients(killer)
        assert terminated == {v.info.backend_pid for v in victims}
        assert terminate_other_clients(killer) <= terminated  # the same backends, until they have exited
        assert killer.execute("SELECT 1").fetchone() == (1,)
    for victim in victims:
        with pytest.raises(psycopg.OperationalError):
            victim.execute("SELECT 1")


def test_the_table_audit_counts_duplicates_missing_and_unexpected_rows(postgres_server):
    table = f"clicks_{uuid.uuid4().hex[:8]}"
    with postgres_server.connect(autocommit=True) as conn:
        conn.execute(f'CREATE TABLE public.{table} (event_id text, topic text, "partition" int, "offset" bigint)')
        conn.execute(f"INSERT INTO public.{table} VALUES ('a', 'clicks', 0, 0), ('b', 'clicks', 0, 1), "
                     "('b', 'clicks', 0, 1), ('z', 'clicks', 1, 99)")
    expected = {("clicks", 0, 0): 1, ("clicks", 0, 1): 1, ("clicks", 0, 2): 1}

    out = audit_table_rows("clicks_table", postgres_server, f"public.{table}", expected)

    assert (out.records, out.duplicates, out.missing, out.unexpected) == (4, 1, 1, 1)
    assert not out.ok

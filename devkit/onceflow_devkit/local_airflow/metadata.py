"""Run and task states read straight from Airflow's metadata database.

Runs in the calling process (test, CLI), never inside Airflow. Reading the
DB takes milliseconds where ``airflow tasks states-for-dag-run`` pays a full
CLI start (5-10 s on 2 busy cores). Only the long-stable columns of
``dag_run`` and ``task_instance`` are used, through plain SQL, so any
database SQLAlchemy can reach works, not only SQLite.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa


@dataclass(frozen=True)
class RunStates:
    """One DAG run as the metadata DB records it."""

    dag_id: str
    run_id: str
    state: str | None
    logical_date: datetime | None = None  # None for runs triggered without one (Airflow 3)
    # task_id -> state of its latest try (mapped tasks: "task_id[map_index]").
    tasks: dict[str, str | None] = field(default_factory=dict)


class MetadataDb:
    def __init__(self, sql_alchemy_conn: str):
        self.url = sql_alchemy_conn

    def _query(self, sql: str, **params) -> list[sa.Row]:
        engine = sa.create_engine(self.url)
        try:
            with engine.connect() as conn:
                return list(conn.execute(sa.text(sql), params))
        finally:
            engine.dispose()

    def last_run_pk(self, dag_id: str) -> int:
        """The highest ``dag_run.id`` of ``dag_id`` so far (0 when none, or no schema yet)."""
        try:
            rows = self._query("SELECT MAX(id) FROM dag_run WHERE dag_id = :dag_id", dag_id=dag_id)
        except sa.exc.OperationalError:  # not migrated yet
            return 0
        return rows[0][0] or 0

    def newest_run_after(self, dag_id: str, pk: int) -> str | None:
        """The run id of the newest run of ``dag_id`` created after ``last_run_pk() == pk``."""
        rows = self._query(
            "SELECT run_id FROM dag_run WHERE dag_id = :dag_id AND id > :pk ORDER BY id DESC LIMIT 1",
            dag_id=dag_id,
            pk=pk,
        )
        return rows[0][0] if rows else None

    def task_windows(self, dag_id: str, run_id: str) -> dict[str, tuple[datetime, datetime]]:
        """task_id -> (start, end) of its latest try, for the tasks of the run that ran to an end."""
        rows = self._query(
            "SELECT task_id, start_date, end_date FROM task_instance WHERE dag_id = :dag_id AND run_id = :run_id "
            "AND map_index < 0 AND start_date IS NOT NULL AND end_date IS NOT NULL ORDER BY start_date",
            dag_id=dag_id, run_id=run_id,
        )
        return {task: (_utc(start), _utc(end)) for task, start, end in rows}

    def returned(self, dag_id: str, run_id: str, task_id: str) -> Any:
        """What the task's latest try returned (its ``return_value`` XCom, JSON), or None."""
        rows = self._query(
            "SELECT value FROM xcom WHERE dag_id = :dag_id AND run_id = :run_id AND task_id = :task_id "
            "AND key = 'return_value' AND map_index < 0",
            dag_id=dag_id, run_id=run_id, task_id=task_id,
        )
        if not rows or rows[0][0] is None:
            return None
        value = rows[0][0]
        return json.loads(value) if isinstance(value, (str, bytes)) else value

    def task_seconds(self, dag_id: str, run_id: str) -> dict[str, float]:
        """task_id -> seconds its latest try ran, in the order the tasks started."""
        return {task: (end - start).total_seconds() for task, (start, end) in self.task_windows(dag_id, run_id).items()}

    def run_states(self, dag_id: str, run_id: str) -> RunStates | None:
        runs = self._query(
            "SELECT state, logical_date FROM dag_run WHERE dag_id = :dag_id AND run_id = :run_id", dag_id=dag_id, run_id=run_id
        )
        if not runs:
            return None
        tasks = self._query(
            "SELECT task_id, map_index, state FROM task_instance "
            "WHERE dag_id = :dag_id AND run_id = :run_id ORDER BY task_id, map_index",
            dag_id=dag_id,
            run_id=run_id,
        )
        return RunStates(
            dag_id=dag_id,
            run_id=run_id,
            state=runs[0][0],
            logical_date=_utc(runs[0][1]),
            tasks={(t if m < 0 else f"{t}[{m}]"): s for t, m, s in tasks},
        )


def _utc(value) -> datetime | None:
    # SQLite hands back the stored text, other databases a datetime; Airflow stores UTC.
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)

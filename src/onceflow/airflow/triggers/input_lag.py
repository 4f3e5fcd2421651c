"""``InputLagTrigger``: starts a pipeline's run when its input has waited long enough.

Runs in Airflow's triggerer as the AssetWatcher of the pipeline's input Asset
(``onceflow.config.input_schedule``). Every ``poll_s`` it looks at the input's last
stable offsets and the ledger (``onceflow.core.lag``: records after the last
committed batch, the age of the oldest) and asks ``reason_to_fire``; each
event it yields becomes an Asset event, which the scheduler turns into a run.
It keeps running: after firing it waits for the batch of that run, so one
burst of input starts one run, not one per look; the time that run took to
commit is how much earlier the age rule fires next (``LastFiring``).

The looks are blocking calls (Kafka, the warehouse, connections through
hooks) and run in a thread, so the triggerer's event loop never waits on them.
One Kafka consumer serves every look (a new one per look would cost a
connection and a metadata round trip each poll). A look that fails (Kafka or
the warehouse unreachable) is logged, the consumer closed, and both retried
at the next poll: the trigger never dies of it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from onceflow.config.input_schedule import InputSchedule, InputState, LastFiring, reason_to_fire
from onceflow.core.states import BatchState
from onceflow.airflow.deployed import DeployedPipeline
from onceflow.core.lag import input_lag
from onceflow.pipeline.spec import PipelineSpec

log = logging.getLogger(__name__)


class InputLagTrigger(BaseEventTrigger):
    def __init__(self, *, dag_id: str, spec_json: str, warehouse: str, kafka_conn_id: str, aws_conn_id: str | None,
                 records: int | None, max_age_s: float | None, poll_s: float, stall_s: float):
        super().__init__()
        self.dag_id = dag_id
        self.spec_json = spec_json
        self.warehouse = warehouse
        self.kafka_conn_id = kafka_conn_id
        self.aws_conn_id = aws_conn_id
        self.schedule = InputSchedule(records, max_age_s, poll_s, stall_s)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__name__}", {
            "dag_id": self.dag_id, "spec_json": self.spec_json, "warehouse": self.warehouse,
            "kafka_conn_id": self.kafka_conn_id, "aws_conn_id": self.aws_conn_id,
            "records": self.schedule.records, "max_age_s": self.schedule.max_age_s,
            "poll_s": self.schedule.poll_s, "stall_s": self.schedule.stall_s,
        })

    def _runtime(self):
        deployed = DeployedPipeline(self.dag_id, PipelineSpec.from_json(self.spec_json), self.warehouse,
                                    self.kafka_conn_id, self.aws_conn_id)
        return deployed.runtime(identity=f"airflow-triggerer:{self.dag_id}")

    def look(self, runtime, source) -> InputState:
        """One look at the input (through ``source``, an open offset source) and the ledger
        (blocking: run in a thread)."""
        # The newest batch first, then the lag: a batch that commits between the two reads is then
        # either seen in flight or left out of the lag, never seen done with its records still waiting.
        latest = runtime.reader.describe()
        age = None if latest is None else max(0.0, time.time() - latest.plan.created_at_ms / 1000)
        in_flight = age if latest is not None and not latest.state.terminal else None
        aborted = age if latest is not None and latest.state is BatchState.ABORTED else None
        rows = input_lag(runtime, source=source)
        ages = [r["oldest_uncommitted_age_s"] for r in rows if r["lag"] and r["oldest_uncommitted_age_s"] is not None]
        return InputState(sum(r["lag"] for r in rows), max(ages, default=None),
                          latest.batch_seq if latest else 0, in_flight, aborted)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        runtime = source = None
        last = LastFiring()
        try:
            while True:
                try:
                    if source is None:
                        runtime = await asyncio.to_thread(self._runtime)
                        source = await asyncio.to_thread(runtime.offset_source, min(30.0, self.schedule.poll_s * 4))
                    state = await asyncio.to_thread(self.look, runtime, source)
                except Exception as exc:  # Kafka, the warehouse or a connection unreachable now: look again later
                    log.warning("%s: could not look at the input (%s); next look in %.0f s", self.dag_id, exc,
                                self.schedule.poll_s)
                    source = await asyncio.to_thread(_close, source)
                else:
                    now = time.monotonic()
                    last.looked(state, now)
                    reason = reason_to_fire(self.schedule, state, last.after_seq, last.age_s(now), last.lead_s)
                    if reason is not None:
                        log.info("%s: starting a run: %s", self.dag_id, reason)
                        last.fired(state, now)
                        yield TriggerEvent({"pipeline": runtime.spec.name, "reason": reason, "waiting": state.waiting,
                                            "oldest_age_s": state.oldest_age_s, "after_batch": state.latest_seq,
                                            "lead_s": round(last.lead_s, 2)})
                await asyncio.sleep(self.schedule.poll_s)
        finally:  # cancelled (the DAG paused or changed, the triggerer stopping): release the consumer
            _close(source)


def _close(source) -> None:
    """Close an offset source, if any, whatever state its connection is in; returns None (no source)."""
    if source is not None:
        try:
            source.close()
        except Exception:  # noqa: BLE001 - a broken consumer is being dropped anyway
            log.debug("closing the offset source failed", exc_info=True)

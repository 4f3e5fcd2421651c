"""onceflow's metrics, through Airflow's own metrics setup: whatever the
deployment's ``[metrics]`` section turns on (nothing is sent when nothing is;
StatsD is tested, OpenTelemetry is not). The commit and rollback tasks emit them
once a batch is finished; ``onceflow.<pipeline>.`` prefixes every name:

    batches.committed / batches.aborted       counter
    records_in, records_out.<output>          gauge: records of the batch
    stage.<stage>                             timing (ms): waiting_for_spark, pre_commit, decision, commit_or_abort
    transaction_age_at_decision               gauge: the oldest open transaction's age at the decision,
                                              as a fraction of its timeout (1.0: the broker aborts it)
    input_lag, input_lag.<topic>.<partition>  gauge: records between the committed end and the last stable offset

A metric must never fail a batch: errors are logged and dropped.
"""

from __future__ import annotations

import logging
import re

from airflow.sdk.observability import stats

from onceflow.core.states import BatchState
from onceflow.sinks import open_transactions_of
from onceflow.core.batch_view import stage_durations_ms

log = logging.getLogger(__name__)
PREFIX = "onceflow"


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "_", text).strip("_").lower()


def transaction_age_at_decision(status, spec) -> float | None:
    decided = status.timings.get("decided")
    used = [txn.used(decided) for _name, txn in open_transactions_of(spec, status.votes)] if decided else []
    return max(used) if used else None


def batch_finished(status, spec, lag: list[dict] | None = None) -> None:
    """Emit the metrics of one finished batch (and the input lag after it, when known)."""
    try:
        name = f"{PREFIX}.{_slug(spec.name)}"
        tags = {"pipeline": spec.name}
        stats.incr(f"{name}.batches.{status.state.value}", tags=tags)
        if status.state is BatchState.COMMITTED:
            stats.gauge(f"{name}.records_in", status.plan.records, tags=tags)
            for output, vote in sorted(status.votes.items()):
                stats.gauge(f"{name}.records_out.{_slug(output)}", vote.records, tags={**tags, "output": output})
            age = transaction_age_at_decision(status, spec)
            if age is not None:
                stats.gauge(f"{name}.transaction_age_at_decision", round(age, 4), tags=tags)
        for stage, ms in stage_durations_ms(dict(status.timings)).items():
            stats.timing(f"{name}.stage.{_slug(stage)}", ms, tags={**tags, "stage": stage})
        if lag is not None:
            stats.gauge(f"{name}.input_lag", sum(row["lag"] for row in lag), tags=tags)
            for row in lag:
                stats.gauge(f"{name}.input_lag.{_slug(row['topic'])}.{row['partition']}", row["lag"], tags=tags)
    except Exception:  # a metric must never fail the batch it describes
        log.warning("could not emit the metrics of batch %s", status.batch_id, exc_info=True)

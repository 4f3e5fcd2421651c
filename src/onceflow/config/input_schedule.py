"""Batches when data arrives: a pipeline scheduled on its input, not on a clock.

    from onceflow.airflow.dag_factory import pipeline_dag
    from onceflow.config.input_schedule import when_input

    dag = pipeline_dag(ORDERS, schedule=when_input(records=10_000, max_age_s=60))

The DAG is scheduled on an Asset standing for the pipeline's input
(``onceflow.airflow.dag_schedule.input_asset``), watched by ``InputLagTrigger``
(``onceflow.airflow.triggers.input_lag``) in Airflow's
triggerer: no worker slot is held while it waits. It starts a run when the
records not yet committed reach ``records``, or when the oldest of them would
be ``max_age_s`` old by the time its batch commits, whichever comes first;
then it waits for the batch of that run before it fires again, so runs do not
pile up behind a slow batch.

``max_age_s`` bounds how long a record waits to be committed, not how long it waits
for its run to start: the trigger starts the run early by the time its previous run
took from the trigger's event to its batch committed (``LastFiring``). A pipeline whose
runs take longer than ``max_age_s`` starts the next run as soon as a record waits
(still one run at a time). Until the trigger has seen one of its runs commit (after
the triggerer starts), it waits the whole ``max_age_s``.

Offsets pipelines only: an interval pipeline's runs are its data intervals.

A DAG file that takes its schedule from the environment spells it
``ONCEFLOW_SCHEDULE="input: records=10000, max_age_s=60"`` (``parse_schedule``).
"""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.config.settings import ConfigurationError


@dataclass(frozen=True)
class InputSchedule:
    records: int | None = None       # fire when this many records wait
    max_age_s: float | None = None   # fire so that the oldest waiting record is committed by this age (LastFiring)
    poll_s: float = 5.0              # how often the trigger looks (Kafka offsets and the ledger's head)
    # A run the trigger started that planned nothing within this time (it failed before planning,
    # or was never scheduled) does not hold the next one back any longer; nor does a batch left
    # undecided this long (the next run's plan task recovers it). Default: the spark task's
    # timeout plus ABORT_BACKOFF_S, so a long batch never counts as stalled.
    stall_s: float | None = None

    def check(self, pipeline: str) -> "InputSchedule":
        if self.records is None and self.max_age_s is None:
            raise ConfigurationError(f"pipeline {pipeline!r}: when_input() needs records=N, max_age_s=T or both")
        for name in ("records", "max_age_s", "poll_s", "stall_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigurationError(f"pipeline {pipeline!r}: when_input({name}={value}) must be positive")
        return self


INPUT_PREFIX = "input:"


def parse_schedule(text: str | None) -> "InputSchedule | str | None":
    """``ONCEFLOW_SCHEDULE``: ``none`` (triggered runs only), ``input: records=N, max_age_s=T[, poll_s=P,
    stall_s=S]`` (when_input), or anything else as it is (a cron expression or preset)."""
    text = (text or "").strip()
    if text.lower() in ("", "none"):
        return None
    if not text.lower().startswith(INPUT_PREFIX):
        return text
    fields = {"records": int, "max_age_s": float, "poll_s": float, "stall_s": float}
    given: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text[len(INPUT_PREFIX):].split(","))):
        name, _, value = (s.strip() for s in item.partition("="))
        if name not in fields or not value:
            raise ConfigurationError(f"ONCEFLOW_SCHEDULE={text!r}: {item!r} is not one of "
                                     f"{', '.join(f + '=<number>' for f in fields)}")
        try:
            given[name] = fields[name](value)
        except ValueError:
            raise ConfigurationError(f"ONCEFLOW_SCHEDULE={text!r}: {name}={value!r} is not a number") from None
    return when_input(**given)


# After an aborted batch, the replay waits this long (from the aborted batch's plan), so a batch
# that fails at once does not start a run at every look.
ABORT_BACKOFF_S = 60.0


def when_input(records: int | None = None, max_age_s: float | None = None, poll_s: float = 5.0,
               stall_s: float | None = None) -> InputSchedule:
    """A schedule for ``pipeline_dag``: a run when ``records`` wait or the oldest would be ``max_age_s``
    old by the time its batch commits."""
    return InputSchedule(records, max_age_s, poll_s, stall_s)


@dataclass(frozen=True)
class InputState:
    """What the trigger sees at one look."""

    waiting: int                      # records after the last committed batch, up to the last stable offsets
    oldest_age_s: float | None        # age of the oldest of them (None: none waits)
    latest_seq: int                   # the newest planned batch (0: none)
    in_flight_age_s: float | None     # age of the newest batch if it is not decided and done, else None
    aborted_age_s: float | None = None  # age of the newest batch if it was aborted, else None


class LastFiring:
    """What the trigger remembers of the last run it started: the newest batch when it fired
    (``after_seq``, None: it has not fired), when (``at``), and ``lead_s``, how much earlier than
    ``max_age_s`` the age rule fires: the time that run took from the trigger's event to the first
    look that finds a newer batch committed (its run's, unless a manual run's batch came first; up
    to ``poll_s`` late, so early rather than late). 0 until one of its runs has committed; a newer
    batch aborted first measures nothing."""

    def __init__(self):
        self.after_seq: int | None = None
        self.at = 0.0
        self.lead_s = 0.0
        self._measuring = False

    def fired(self, state: InputState, now: float) -> None:
        self.after_seq, self.at, self._measuring = state.latest_seq, now, True

    def age_s(self, now: float) -> float | None:
        """How long ago it fired (None: it has not)."""
        return None if self.after_seq is None else now - self.at

    def looked(self, state: InputState, now: float) -> None:
        """Measure the run it started, at the first look that finds a newer batch committed."""
        if not self._measuring or state.latest_seq <= self.after_seq:
            return
        if state.aborted_age_s is not None:
            self._measuring = False  # an aborted batch says nothing of how long a batch takes
        elif state.in_flight_age_s is None:
            self.lead_s, self._measuring = now - self.at, False


def reason_to_fire(schedule: InputSchedule, state: InputState, fired_after_seq: int | None,
                   fired_age_s: float | None, lead_s: float = 0.0) -> str | None:
    """Why a run should start now, or None. ``fired_after_seq``: the newest batch when the trigger
    last fired (None: it has not), ``fired_age_s`` how long ago; ``lead_s``: ``LastFiring.lead_s``."""
    assert schedule.stall_s is not None, "input_asset sets stall_s"
    if state.in_flight_age_s is not None and state.in_flight_age_s < schedule.stall_s:
        return None  # a batch is on its way; its run ends before the next can start
    if fired_after_seq is not None and state.latest_seq <= fired_after_seq and (fired_age_s or 0) < schedule.stall_s:
        return None  # the run we started has not planned its batch yet
    if state.aborted_age_s is not None and state.aborted_age_s < ABORT_BACKOFF_S:
        return None  # the newest batch failed: its replay waits a little
    if state.waiting <= 0:
        return None
    if schedule.records is not None and state.waiting >= schedule.records:
        return f"{state.waiting} records wait (threshold {schedule.records})"
    if schedule.max_age_s is not None and state.oldest_age_s is not None and state.oldest_age_s + lead_s >= schedule.max_age_s:
        early = f", less the {lead_s:.1f} s the last run took to commit" if lead_s else ""
        return (f"the oldest of {state.waiting} waiting records is {state.oldest_age_s:.0f} s old "
                f"(threshold {schedule.max_age_s:g} s{early})")
    return None

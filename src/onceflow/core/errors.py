"""Errors the coordinator raises to its caller (an Airflow task, a Spark
driver). Each names the pipeline, the batch and what to do.

How an Airflow task should treat them:
- ``RetryLater``: transient, nothing lost; let Airflow retry the task.
- ``BatchAborted``: the batch was aborted (offsets did not move); the run
  fails, the next run re-reads the same records.
- ``CommitFailed`` / ``AbortFailed``: a participant cannot apply a decision
  (I7). The decision stands; a human must look before the pipeline goes on.
- ``StaleAttempt``: a zombie (older attempt, or an attempt after the
  decision) tried to add to the batch; its output is ignored.
- ``ConcurrentPlanError``: two runs planned the same batch at once.
- ``InterventionRefused``: an operator's split or skip cannot take effect
  (``onceflow split`` / ``skip`` print why); nothing changed.
- ``PlanningError`` (``OffsetsLostError``): the next batch cannot be planned
  (``onceflow.core.planning``); nothing was planned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from onceflow.core.states import IllegalTransition  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from onceflow.core.planning.source import TopicPartition


class CoordinatorError(RuntimeError):
    """Base class of the coordinator's own errors."""


class RetryLater(CoordinatorError):
    """A participant or the ledger is temporarily unable; retry the task."""


class BatchAborted(CoordinatorError):
    """The batch ended ABORTED (the commit found, or wrote, an ABORT decision)."""


class CommitFailed(CoordinatorError):
    """A participant answered FAILED to commit after COMMIT was decided."""


class AbortFailed(CoordinatorError):
    """A participant answered FAILED to abort after ABORT was decided."""


class StaleAttempt(CoordinatorError, IllegalTransition):
    """An older attempt (a zombie) tried to vote; its vote is not counted."""


class ConcurrentPlanError(CoordinatorError):
    """Another run wrote the plan of the same batch first."""


class InterventionRefused(CoordinatorError):
    """An operator's split or skip of a batch cannot take effect; nothing changed."""


class PlanningError(RuntimeError):
    """The next batch cannot be planned; the message says why and what to do."""


class OffsetsLostError(PlanningError):
    """Records the next batch must read are gone from the log (retention)."""

    def __init__(self, message: str, lost: Mapping[TopicPartition, tuple[int, int]]):
        super().__init__(message)
        self.lost = dict(lost)

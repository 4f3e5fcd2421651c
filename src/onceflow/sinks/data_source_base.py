"""The base of every sink kind's Spark data source: the write skeleton, once.

A kind's data source subclasses ``PreCommitSource`` and its writer
``PreCommitWriter``, and keeps only what is its own: how a task attempt stages
its split (``stage``), the vote the staged splits make (``vote``) and, if it
has any, what a failed job's messages let it undo (``discard``).

Call sequence (Spark's Python ``DataSource`` API, ``pyspark.sql.datasource``;
in brackets, the step of Spark's ``FileCommitProtocol`` it matches)::

    PreCommitSource.writer(schema, overwrite)  driver [setupJob]: overwrite refused, the options
                                               read and checked (fails fast)
    PreCommitWriter.write(batches)             executor, once per task ATTEMPT [setupTask ...
                                               commitTask]: stage(batches, TaskAttempt.current()),
                                               whose message goes back to the driver
    PreCommitWriter.commit(messages)           a Python worker (NOT the driver), once per job
                                               [commitJob], with the message of the one task
                                               attempt Spark took per split: record_vote(vote(...))
    PreCommitWriter.abort(messages)            a Python worker, when the job fails [abortJob]:
                                               discard(messages); a failed task sent none, so
                                               what it staged is the rollback task's to end

Each of the writer's calls runs armed with the job's ``faults`` option
(``writer_options.armed_as_job``). Messages of tasks that sent none (``None``)
never reach ``vote`` or ``discard``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Iterator, Mapping, TypeVar

from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from onceflow.core.batch_id import BatchId
from onceflow.core.participant import Vote
from onceflow.sinks.votes import VOTE_PATH_OPTION, record_vote
from onceflow.sinks.writer_options import FAULTS_OPTION, armed_as_job, checked_options, int_option

Message = TypeVar("Message", bound=WriterCommitMessage)
# The job's options (onceflow.sinks.api.JOB_OPTIONS) that are integers.
INTEGER_OPTIONS = ("batch_seq", "planned_at_ms", "attempt", "replaces")


@dataclass(frozen=True)
class TaskAttempt:
    """The Spark task attempt running ``write``: its split and an id no other attempt of the application has."""

    split: int  # TaskContext.partitionId(): Spark partition i is split i
    # TaskContext.taskAttemptId(), not attemptNumber(): that one starts again at 0 when Spark retries a stage,
    # so a zombie task of the failed stage attempt and the retried stage's task would stage as one.
    task_attempt: int

    @classmethod
    def current(cls) -> "TaskAttempt":
        """Executor: the task attempt this Python worker runs."""
        task = TaskContext.get()
        return cls(task.partitionId(), task.taskAttemptId())


@dataclass(frozen=True)
class WriteOptions:
    """One write's options as ``writer()`` got them: names lowercased (Spark lowercases them), the
    source's required ones present, and where the vote goes (the pipeline's ledger, or ``vote_path``)."""

    format: str
    raw: Mapping[str, str]

    @classmethod
    def checked(cls, fmt: str, options: Mapping[str, str], required: tuple[str, ...]) -> "WriteOptions":
        opts = checked_options(fmt, options, required)
        if not (opts.get("pipeline") and opts.get("deployment")) and not opts.get(VOTE_PATH_OPTION):
            raise ValueError(f"{fmt}: give options 'pipeline' and 'deployment' (the pipeline's name and "
                             f"Deployment.to_option(): the vote goes to its ledger) or '{VOTE_PATH_OPTION}' "
                             "(the vote is written there)")
        for key in INTEGER_OPTIONS:
            int_option(fmt, opts, key)  # a wrong one fails here, on the driver
        return cls(fmt, opts)

    def __getitem__(self, key: str) -> str:
        return self.raw[key]

    def get(self, key: str, default: str = "") -> str:
        return self.raw.get(key) or default

    def integer(self, key: str) -> int | None:
        """Option ``key`` as an integer, None when absent."""
        return int_option(self.format, self.raw, key)

    @property
    def sink(self) -> str:
        return self.raw["sink"]

    @property
    def batch_seq(self) -> int:
        return int(self.raw["batch_seq"])

    @property
    def batch_id(self) -> str:
        return str(BatchId(self.batch_seq))

    @property
    def planned_at_ms(self) -> int | None:
        return self.integer("planned_at_ms")

    @property
    def attempt(self) -> int:
        return int(self.raw["attempt"])

    @property
    def replaces(self) -> int | None:
        """The committed batch this one replaces (a reprocessed interval), if any."""
        return self.integer("replaces")

    @property
    def faults(self) -> str:
        """The run's faults, for a Spark Connect server's Python workers (``writer_options``)."""
        return self.get(FAULTS_OPTION)


@dataclass(frozen=True)
class StagedSplit(WriterCommitMessage):
    """A task attempt's message for a kind whose vote records a split as a dict (a transaction's id, a
    stage's name and row count)."""

    staged: dict


class PreCommitWriter(DataSourceArrowWriter, Generic[Message]):
    """Stages a sink's splits, one per task attempt, and votes the attempts Spark took. A kind defines
    ``stage`` and ``vote``, and ``discard`` if a failed job's messages let it undo something."""

    def __init__(self, options: WriteOptions, schema: Any):
        self.options = options
        self.schema = schema  # the DataFrame's StructType

    @armed_as_job
    def write(self, iterator: Iterator) -> Message:
        """Executor: stage this task attempt's split."""
        return self.stage(iterator, TaskAttempt.current())

    @armed_as_job
    def commit(self, messages: list[Message | None]) -> None:
        """Python worker, once per successful job: vote for exactly these task attempts."""
        record_vote(self.options.raw, self.vote([m for m in messages if m is not None]))

    @armed_as_job
    def abort(self, messages: list[Message | None]) -> None:
        """Python worker, once per failed job: undo what the messages name."""
        self.discard([m for m in messages if m is not None])

    def stage(self, batches: Iterator, task: TaskAttempt) -> Message:
        """[executor] Write ``batches`` (Arrow record batches) as ``task``'s copy of its split, so that
        no reader sees it, under a name no other task attempt has; what the vote needs of it."""
        raise NotImplementedError

    def vote(self, messages: list[Message]) -> Vote:
        """[Python worker] The vote for the staged splits ``messages`` name."""
        raise NotImplementedError

    def discard(self, messages: list[Message]) -> None:
        """[Python worker] Undo what a failed job's ``messages`` name. Default: nothing, the rollback
        task ends what the batch staged."""


class PreCommitSource(DataSource):
    """A sink kind's Spark data source: ``format`` is the name it registers under, ``writes`` what it
    does (said when overwrite is refused), ``required`` the options it cannot write without."""

    format: ClassVar[str]
    writes: ClassVar[str]
    required: ClassVar[tuple[str, ...]]
    writer_type: ClassVar[type[PreCommitWriter]]

    @classmethod
    def name(cls) -> str:
        return cls.format

    @classmethod
    def register(cls, spark) -> None:
        """Driver: make ``format(cls.format)`` available in this session."""
        spark.dataSource.register(cls)

    def writer(self, schema, overwrite: bool) -> PreCommitWriter:
        if overwrite:
            raise ValueError(f"{self.format} {self.writes} and never overwrites: use .mode('append'); "
                             "what a batch replaces is decided at commit, not by the writer")
        return self.writer_type(self.write_options(), schema)

    def write_options(self) -> WriteOptions:
        """The options read and checked (a source with options of its own parses them here too)."""
        return WriteOptions.checked(self.format, self.options, self.required)

"""The input lag as the page asks for it: of Kafka, in the background, at most one question per
pipeline at a time, the answer kept ``ttl_s`` and each Kafka request bounded by ``timeout_s``.

A page waits for an answer only as long as it chooses (``wait_s``): the pipeline page a few
seconds, the list of fifty pipelines a fraction of one. What is not answered by then is shown
as the last answer (with its age) or as pending, and lands in the cache for the next look.
A failure is an answer too (``error``), kept ``retry_s`` and shown until a later question succeeds.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from confluent_kafka import KafkaError, KafkaException

from onceflow.core.coordinator import wall_clock_ms
from onceflow.core.lag import input_lag


# librdkafka's codes for a Kafka that gave no answer: unreachable, or not in time. Any other code is
# Kafka's answer (a refusal, an unknown topic), said as it is.
NO_ANSWER = frozenset({KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT,
                       KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE, KafkaError.REQUEST_TIMED_OUT,
                       KafkaError.NETWORK_EXCEPTION})


def answered_with(exc: KafkaException) -> KafkaError | None:
    """The error Kafka answered with, or None when it gave no answer (``NO_ANSWER``)."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) and error.code() not in NO_ANSWER else None


@dataclass(frozen=True)
class LagReading:
    """Per input partition, ``input_lag``'s rows as Kafka answered at ``asked_ms``; ``error``:
    why the lag could not be read, and ``kafka_silent`` whether that is Kafka's silence (down or
    slow) rather than another cause (a configuration or storage error). Neither (``asked_ms``
    None): no answer yet."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    asked_ms: int | None = None
    kafka_silent: bool = False

    @property
    def pending(self) -> bool:
        return self.asked_ms is None

    @property
    def records_behind(self) -> int | None:
        return None if self.error or self.pending else sum(r["lag"] for r in self.rows)

    def oldest_uncommitted_age_s(self, now_ms: int) -> float | None:
        """The oldest waiting record's age now (the answer's ages, plus the time since it was asked)."""
        ages = [r["oldest_uncommitted_age_s"] for r in self.rows if r["lag"] and r["oldest_uncommitted_age_s"] is not None]
        if not ages or self.error or self.pending:
            return None
        return max(ages) + max(0, now_ms - self.asked_ms) / 1000


class LagCache:
    def __init__(self, ttl_s: float = 15.0, timeout_s: float = 3.0, workers: int = 16,
                 ask: Callable[..., list[dict[str, Any]]] = input_lag, clock: Callable[[], int] = wall_clock_ms,
                 retry_s: float = 3.0):
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.retry_s = retry_s  # a failure is kept this long before Kafka is asked again
        self._ask = ask
        self._clock = clock
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._answers: dict[str, LagReading] = {}
        self._asking: dict[str, Future] = {}

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:  # under self._lock
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="onceflow-lag")
        return self._pool

    def _answer(self, key: str, runtime, asked_ms: int) -> None:
        try:
            reading = LagReading(self._ask(runtime, asked_ms, timeout_s=self.timeout_s), None, asked_ms)
        except KafkaException as exc:
            error = answered_with(exc)
            reading = (LagReading([], f"Kafka answered the lag's question with an error: {error.str()} ({error.name()})",
                                  asked_ms) if error is not None else self._silent(exc, asked_ms))
        except (TimeoutError, OSError) as exc:
            reading = self._silent(exc, asked_ms)
        except Exception as exc:  # not Kafka's silence: said as it is, not blamed on the broker
            reading = LagReading([], f"the lag could not be read: {type(exc).__name__}: {exc}", asked_ms)
        with self._lock:
            self._answers[key] = reading
            self._asking.pop(key, None)

    def _silent(self, exc: Exception, asked_ms: int) -> LagReading:
        """Kafka down or slow: the ledger's part still helps."""
        return LagReading([], f"Kafka did not answer within {self.timeout_s:g} s ({type(exc).__name__})", asked_ms,
                          kafka_silent=True)

    def ask(self, key: str, runtime) -> Future | None:
        """Ask Kafka for ``key``'s lag unless a fresh answer is kept or a question is out; the question, if any."""
        with self._lock:
            if key in self._asking:
                return self._asking[key]
            kept = self._answers.get(key)
            now = self._clock()
            # A failure is asked again sooner than an answer, but not at every look: a silent Kafka is
            # not sent a new client per page view.
            if kept is not None and now - kept.asked_ms < (self.ttl_s if kept.error is None else self.retry_s) * 1000:
                return None
            future = self._executor().submit(self._answer, key, runtime, now)
            self._asking[key] = future
            return future

    def reading(self, key: str, runtime, wait_s: float) -> LagReading:
        """The lag of ``key``: asked if need be, waited for at most ``wait_s``, else the last answer kept."""
        future = self.ask(key, runtime)
        if future is not None:
            wait([future], timeout=wait_s)
        return self.kept(key)

    def kept(self, key: str) -> LagReading:
        with self._lock:
            return self._answers.get(key, LagReading())

"""The pipeline registry: name -> what a batch reads, how it transforms, where it writes.

A pipeline's transform is a function ``(records: DataFrame, batch_id: str) ->
{output name: DataFrame}`` over one batch of Kafka records; it must return
exactly the outputs its spec declares. Output kinds:

- ``files``: Parquet under ``<warehouse>/<location>`` (onceflow.files);
  the DataFrame's columns are the file's columns.
- ``kafka``: records to topic ``<location>``; the DataFrame has ``key`` and
  ``value`` (binary) columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

OUTPUT_KINDS = ("files", "kafka")


@dataclass(frozen=True)
class OutputSpec:
    name: str
    kind: str       # "files" or "kafka"
    location: str   # files: path below the warehouse root; kafka: topic

    def __post_init__(self) -> None:
        if self.kind not in OUTPUT_KINDS:
            raise ValueError(f"output {self.name}: kind {self.kind!r} is not one of {OUTPUT_KINDS}")


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    input_topics: tuple[str, ...]
    transform: Callable[..., Mapping[str, object]]
    outputs: tuple[OutputSpec, ...]

    def output(self, name: str) -> OutputSpec:
        for out in self.outputs:
            if out.name == name:
                return out
        raise KeyError(f"pipeline {self.name} has no output {name!r}; it has {[o.name for o in self.outputs]}")


def _clickstream() -> PipelineSpec:
    from . import clickstream

    return PipelineSpec(
        name="clickstream",
        input_topics=("clicks",),
        transform=clickstream.transform,
        outputs=(
            OutputSpec("page_minute_counts", "files", "clickstream/page_minute_counts"),
            OutputSpec("clicks_enriched", "kafka", "clicks_enriched"),
            OutputSpec("clicks_dead_letter", "kafka", "clicks_dead_letter"),
        ),
    )


# Factories, so that importing the registry does not import pyspark.
REGISTRY: Mapping[str, Callable[[], PipelineSpec]] = {"clickstream": _clickstream}


def get_pipeline(name: str) -> PipelineSpec:
    try:
        return REGISTRY[name]()
    except KeyError:
        raise KeyError(f"no pipeline named {name!r}; registered: {sorted(REGISTRY)} "
                       "(add yours to onceflow.pipelines.REGISTRY)") from None

"""The columns of a batch's input records, as the range data source gives them
(no pyspark here: DAG parsing checks a spec's ``input_columns``)."""

from __future__ import annotations

from onceflow.config.settings import ConfigurationError

# The columns of a batch's input records (the onceflow_kafka_range source), in order.
INPUT_COLUMNS = ("key", "value", "headers", "topic", "partition", "offset", "timestamp")


def check_input_columns(columns, setting: str) -> tuple[str, ...]:
    """``columns`` in INPUT_COLUMNS order; unknown or none is a ConfigurationError naming ``setting``."""
    wanted = tuple(c.strip() for c in columns)
    unknown = sorted(set(wanted) - set(INPUT_COLUMNS))
    if unknown or not wanted:
        raise ConfigurationError(
            f"{setting}: {unknown or list(wanted)} is not valid: name one or more of {', '.join(INPUT_COLUMNS)}"
        )
    return tuple(c for c in INPUT_COLUMNS if c in wanted)

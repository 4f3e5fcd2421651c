"""The settings the raw baselines' producers run with: onceflow's own.

Read from where onceflow sets them (the writer's bulk-produce settings and
the producer defaults of ``kafka.config``), so the ratios price onceflow's
work, not a tuning difference, and a setting added to onceflow reaches the
baselines too (one once did not: the raw producer alone waited in
``init_transactions``).
"""

from onceflow.kafka.config import PRODUCER_DEFAULTS
from onceflow.sinks.kafka.writer import THROUGHPUT_SETTINGS

PRODUCER_TUNING = {**PRODUCER_DEFAULTS, **THROUGHPUT_SETTINGS}

"""The one rule for pipeline and sink names.

A name becomes part of transactional ids (``onceflow.<pipeline>.<sink>.pool<k>.<split>``),
ledger paths and consumer groups, so it holds no dot: with dots, pipeline
``a.b`` / sink ``c`` and pipeline ``a`` / sink ``b.c`` would share ids and
fence each other.
"""

from __future__ import annotations

import re

from onceflow.config.settings import ConfigurationError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
RULE = "1-100 characters of A-Z, a-z, 0-9, '_' or '-', starting with a letter or digit"


def check_name(what: str, value: str) -> str:
    """``value`` if it follows the rule, else a ConfigurationError naming ``what``."""
    if not isinstance(value, str) or not NAME.match(value):
        raise ConfigurationError(f"{what} {value!r} is not valid: use {RULE}")
    return value


# What every Kafka transactional id of onceflow begins with (onceflow.sinks.kafka.ids derives the rest).
TRANSACTIONAL_ID_PREFIX = "onceflow"


def transactional_id_prefix(pipeline: str) -> str:
    """What every transactional id of ``pipeline`` begins with, up to the separator: a prefixed ACL on it
    grants this pipeline's ids and no other's (``orders.`` is no prefix of ``orders2.``'s ids)."""
    return f"{TRANSACTIONAL_ID_PREFIX}.{check_name('pipeline name', pipeline)}."

"""What onceflow does with each answer a transaction coordinator or partition leader gives (pure logic).

Each broker answer maps to exactly one action in ``ACTIONS``; an answer not
listed is FAIL: unknown is never success. The caller never takes DONE as
proof: some brokers answer "no error" to an EndTxn that did nothing (noida-db
with a wrong producer id), so the sink verifies visibility afterwards. A
connection closed without an answer (Tansu, stale epoch) is an explicit
outcome too, handled like a fencing error.
"""

from __future__ import annotations

import enum


class Action(enum.Enum):
    DONE = "done"            # the coordinator accepted it (still to be verified)
    RETRY = "retry"          # transient: ask again, maybe another coordinator
    VERIFY = "verify"        # the handle is stale: look at the data, then decide
    FAIL = "fail"            # configuration or permission problem: a human must act


CONNECTION_CLOSED = -1000    # pseudo error code: the broker closed the connection without answering
COORDINATOR_NOT_AVAILABLE = 15
TRANSACTIONAL_ID_NOT_FOUND = 105  # DescribeTransactions: the coordinator keeps no state for the id (expired, never used)

# error code -> (name, action). Anything not listed is FAIL: unknown is not success.
ACTIONS: dict[int, tuple[str, Action]] = {
    0: ("NONE", Action.DONE),
    7: ("REQUEST_TIMED_OUT", Action.RETRY),
    14: ("COORDINATOR_LOAD_IN_PROGRESS", Action.RETRY),
    15: ("COORDINATOR_NOT_AVAILABLE", Action.RETRY),
    16: ("NOT_COORDINATOR", Action.RETRY),
    51: ("CONCURRENT_TRANSACTIONS", Action.RETRY),
    47: ("INVALID_PRODUCER_EPOCH", Action.VERIFY),
    48: ("INVALID_TXN_STATE", Action.VERIFY),
    49: ("INVALID_PRODUCER_ID_MAPPING", Action.VERIFY),
    90: ("PRODUCER_FENCED", Action.VERIFY),
    102: ("TRANSACTION_ABORTABLE", Action.VERIFY),
    CONNECTION_CLOSED: ("CONNECTION_CLOSED_WITHOUT_RESPONSE", Action.VERIFY),
    53: ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", Action.FAIL),
    31: ("CLUSTER_AUTHORIZATION_FAILED", Action.FAIL),
    35: ("UNSUPPORTED_VERSION", Action.FAIL),
}


def classify(error_code: int) -> tuple[str, Action]:
    return ACTIONS.get(error_code, (f"UNKNOWN_ERROR_{error_code}", Action.FAIL))

"""A request Kafka's authorizer refused, said as one sentence: who may not do what to which resource.

Both client libraries report a refusal only as an error code of the resource's type
(``AUTHORIZATION_FAILED``); the call that met it knows what it asked for. So each call site
names its needs (resource type -> the operation the ACL table grants, and the resource's
name) and hands any error code it meets to ``check``, which raises ``NotAuthorized`` for a
refusal: "User:onceflow-spark may not WRITE TransactionalId onceflow.orders.daily.b7.0
(opening split 0's transaction): grant it ...". A refusal is never transient: nothing retries
it until a timeout, and nothing is decided on its account; the task fails at once and runs
again once the grant is there.
"""

from __future__ import annotations

from typing import Any, Mapping

from onceflow.config.settings import ConfigurationError
from onceflow.kafka.acls import Resource
from onceflow.kafka.config import principal

# Kafka's error code of a refused request -> the type of the resource it was refused on.
AUTHORIZATION_FAILED: dict[int, Resource] = {
    29: Resource.TOPIC,             # TOPIC_AUTHORIZATION_FAILED
    30: Resource.GROUP,             # GROUP_AUTHORIZATION_FAILED
    31: Resource.CLUSTER,           # CLUSTER_AUTHORIZATION_FAILED
    53: Resource.TRANSACTIONAL_ID,  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
}
FIX = ("grant it, then run the task again (`onceflow acls --pipeline NAME` prints every grant a pipeline needs, "
       "docs/security.md)")

Needs = Mapping[Resource, tuple[str, str]]  # resource type -> (operation, resource name)


class NotAuthorized(ConfigurationError):
    """Kafka's authorizer refused a request: a grant is missing, and a human must add it."""


def is_refusal(code: int) -> bool:
    return code in AUTHORIZATION_FAILED


def refusal(config: Mapping[str, Any], code: int, doing: str, needs: Needs) -> NotAuthorized | None:
    """The ``NotAuthorized`` error ``code`` stands for, met while ``doing`` what ``needs`` says; None if
    ``code`` is no refusal."""
    resource = AUTHORIZATION_FAILED.get(code)
    if resource is None:
        return None
    operation, name = needs.get(resource, ("access", "(not named by the request)"))
    target = resource.label if resource is Resource.CLUSTER else f"{resource.label} {name}"
    said = " ".join(word if word == "or" else word.upper() for word in operation.split())
    return NotAuthorized(f"{principal(config)} may not {said} {target} ({doing}): {FIX}")


def check(config: Mapping[str, Any], code: int, doing: str, needs: Needs) -> None:
    """Raise ``NotAuthorized`` when ``code`` is a refusal; otherwise return, the caller handles the code."""
    refused = refusal(config, code, doing, needs)
    if refused is not None:
        raise refused


def check_exception(config: Mapping[str, Any], exc: BaseException, doing: str, needs: Needs) -> None:
    """``check`` for a confluent-kafka ``KafkaException`` (or one it wraps) or a kafka-python error."""
    error = exc.args[0] if exc.args else None
    code = error.code() if hasattr(error, "code") and callable(error.code) else getattr(exc, "errno", None)
    if isinstance(code, int):
        check(config, code, doing, needs)

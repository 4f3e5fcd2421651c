"""The Kafka cluster a pipeline reads and writes: bootstrap servers plus the
user's librdkafka settings (``security.protocol``, ``sasl.*``, ``ssl.*``),
passed unchanged to every client (``config.py`` adds what the protocol needs)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from onceflow.config import settings
from onceflow.config.broker_profiles import PROFILE_KEY, BrokerProfile, profile, split_profile

# oauthbearer.config holds client secrets; every sasl.oauthbearer.* setting stays out of Spark options.
_SECRET_MARKERS = ("password", "secret", "token", "jaas", "credentials", "key.pem", "keystore.pem", "oauthbearer")
REDACTED = "[redacted]"


# The SASL mechanisms every onceflow client takes from a connection's settings alone: librdkafka, and the
# kafka-python client that ends transactions (txn_protocol). Any other is refused when the connection is read.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")
WHY_NOT = {
    "OAUTHBEARER": "onceflow's EndTxn client (kafka-python) takes an OAUTHBEARER token only from a token provider "
                   "object, which no connection setting can give",
}


def check_sasl_mechanism(config: Mapping[str, Any]) -> None:
    """A ConfigurationError naming the mechanism when not every onceflow client can use it."""
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    if mechanism is None or str(mechanism).upper() in SASL_MECHANISMS:
        return
    why = WHY_NOT.get(str(mechanism).upper(), "not every onceflow client speaks it")
    raise settings.ConfigurationError(
        f"Kafka setting sasl.mechanism={mechanism!r} is not supported: {why}. Use one of {', '.join(SASL_MECHANISMS)} "
        "(SCRAM-SHA-512 over SASL_SSL is what onceflow is tested with)")


def is_secret(key: str) -> bool:
    return any(m in key.lower() for m in _SECRET_MARKERS)


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy safe to log: values of secret-looking keys are replaced."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in config.items()}


@dataclass(frozen=True)
class KafkaCluster:
    bootstrap: str
    client_config: Mapping[str, Any] = field(default_factory=dict)
    # The broker profile (``profiles.PROFILES``): Apache Kafka unless the connection names another.
    profile: str = "apache"

    def __post_init__(self) -> None:
        client_config, named = split_profile(self.client_config)
        object.__setattr__(self, "client_config", client_config)
        if named != "apache":  # the setting among the client settings (a connection's extra) names it
            object.__setattr__(self, "profile", named)
        profile(self.profile)
        check_sasl_mechanism(client_config)

    @property
    def broker(self) -> BrokerProfile:
        """What this cluster's broker needs from onceflow."""
        return profile(self.profile)

    @classmethod
    def from_environment(cls) -> "KafkaCluster":
        """The cluster ``ONCEFLOW_KAFKA_BOOTSTRAP`` names, with ``ONCEFLOW_KAFKA_CONFIG``
        (``onceflow.broker.profile`` among those settings chooses the broker profile)."""
        bootstrap = os.environ.get(settings.KAFKA_BOOTSTRAP_VAR)
        if not bootstrap:
            raise settings.ConfigurationError(
                f"{settings.KAFKA_BOOTSTRAP_VAR} is not set: export your Kafka cluster's bootstrap servers "
                f"(host:port,host:port); security settings go in {settings.KAFKA_CONFIG_VAR}"
            )
        return cls(bootstrap, settings.kafka_client_config())

    def config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka settings for any client of this cluster."""
        return {"bootstrap.servers": self.bootstrap, **self.client_config, **overrides}

    def _profile_setting(self) -> dict[str, str]:
        """The setting that names the profile; none for the default."""
        return {PROFILE_KEY: self.profile} if self.profile != "apache" else {}

    def connection_extra(self) -> dict[str, Any]:
        """This cluster as an Airflow connection's extra (``hooks.kafka``): its settings and profile."""
        return {**self.config(), **self._profile_setting()}

    def profile_env(self) -> dict[str, str]:
        """``ONCEFLOW_KAFKA_CONFIG`` naming the profile, for a process that takes the cluster from its environment."""
        named = self._profile_setting()
        return {settings.KAFKA_CONFIG_VAR: json.dumps({**self.client_config, **named})} if named else {}

    def environment(self) -> dict[str, str]:
        """This cluster as a process's environment, which ``from_environment`` reads back: its settings in
        ``ONCEFLOW_KAFKA_CONFIG`` and their secrets apart in ``ONCEFLOW_KAFKA_SECRETS``."""
        public = {k: v for k, v in self.client_config.items() if not is_secret(k)}
        env = {settings.KAFKA_BOOTSTRAP_VAR: self.bootstrap}
        if public or self._profile_setting():
            env[settings.KAFKA_CONFIG_VAR] = json.dumps({**public, **self._profile_setting()})
        return {**env, **self.secrets_env()}

    def secrets_env(self) -> dict[str, str]:
        """The secret settings alone, in ``ONCEFLOW_KAFKA_SECRETS``: what a Spark executor or a Spark Connect
        server's Python worker needs in its environment, the rest reaching it as data source options."""
        secret = {k: v for k, v in self.client_config.items() if is_secret(k)}
        return {settings.KAFKA_SECRETS_VAR: json.dumps(secret)} if secret else {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.bootstrap!r}, {redact(self.client_config)!r})"

"""Users for tests of who may see what, on a local Airflow.

Airflow's ``SimpleAuthManager`` gives every role read access to every DAG;
``DagDenyingAuthManager`` adds per-user denials of named DAGs (as a real
deployment's auth manager would), so a test can show that a signed-in user
without access to a DAG gets 403. ``auth_env`` is the ``extra_env`` that turns
it on with named users and passwords (the harness's default is "everyone is
admin", under which no request is ever refused).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

from onceflow_devkit.services.process import write_private

DENIED_VAR = "ONCEFLOW_DEVKIT_DENIED_DAGS"  # JSON: {"user": ["dag_id", ...]}


class DagDenyingAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        denied = json.loads(os.environ.get(DENIED_VAR) or "{}").get(user.get_name(), ())
        if details is not None and details.id in denied:
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)


def auth_env(home: Path, users: Mapping[str, tuple[str, str]], denied: Mapping[str, list[str]] | None = None) -> dict[str, str]:
    """``users``: name -> (role, password), roles as SimpleAuthManager names them
    (viewer, user, op, admin). The passwords file is written under ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    passwords = home / "simple_auth_manager_passwords.json"
    write_private(passwords, json.dumps({name: password for name, (_role, password) in users.items()}))
    return {
        "AIRFLOW__CORE__AUTH_MANAGER": f"{__name__}.{DagDenyingAuthManager.__name__}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{name}:{role}" for name, (role, _p) in users.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        DENIED_VAR: json.dumps(dict(denied or {})),
    }

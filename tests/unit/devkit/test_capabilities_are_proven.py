"""Every behaviour the dev kit declares Apache Kafka to have is proven on it in ``make test``.

``kafka_broker.CAPABILITIES`` is a claim about each broker; a test that relies on a behaviour
names it with ``tests.support.require(broker, CAPABILITY)``. A capability no test of the
default run requires would be a claim nothing checks (several were, until the tests of
tests/integration/sinks/kafka/test_broker_capabilities.py). Read from the tests' source: a test
counts when neither it nor its module is marked slow (any slow mark among its decorators,
even on some parameters only, leaves it out).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

from onceflow_devkit.services import kafka_broker
from tests.support import ROOT


def _names_of(capabilities: frozenset[str]) -> dict[str, str]:
    """capability text -> the constant's name in kafka_broker."""
    return {value: name for name, value in vars(kafka_broker).items() if isinstance(value, str) and value in capabilities}


def _marked_slow(nodes, assigned: dict[str, ast.AST]) -> bool:
    """A slow mark in ``nodes``, or in the module-level value of a name they use (a list of
    ``pytest.param(..., marks=pytest.mark.slow)`` given to parametrize)."""
    used = [assigned[n.id] for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in assigned]
    return any("slow" in ast.unparse(node) for node in [*nodes, *used])


def _required_in_default_run() -> dict[str, list[str]]:
    """capability constant name -> the default-run tests that require it (path::function)."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        module = ast.parse(path.read_text())
        assigned = {t.id: n.value for n in module.body if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)}
        if _marked_slow([assigned["pytestmark"]] if "pytestmark" in assigned else [], {}):
            continue
        for test in (n for n in module.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")):
            if _marked_slow(test.decorator_list, assigned):
                continue
            for call in (n for n in ast.walk(test) if isinstance(n, ast.Call)):
                if isinstance(call.func, ast.Name) and call.func.id == "require" and len(call.args) == 2 \
                        and isinstance(call.args[1], ast.Name):
                    found.setdefault(call.args[1].id, []).append(f"{path.relative_to(ROOT)}::{test.name}")
    return found


def _required_read_in_a_fresh_interpreter() -> dict[str, list[str]]:
    # CPython 3.11.7's ast module can be left counting a wrong recursion depth by an earlier parse
    # in the process (gh-106905); every ast.parse after it fails with SystemError. A worker of make
    # test has run Spark and Airflow by now; a new interpreter starts clean.
    scan = f"import json, {__name__} as m; print(json.dumps(m._required_in_default_run()))"
    done = subprocess.run([sys.executable, "-c", scan], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_capability_apache_kafka_is_declared_to_have_is_required_by_a_default_test():
    declared = _names_of(kafka_broker.CAPABILITIES["apache"])
    required = _required_read_in_a_fresh_interpreter()

    unproven = sorted(name for name in declared.values() if name not in required)

    assert len(declared) == len(kafka_broker.CAPABILITIES["apache"])  # each has a constant
    assert unproven == [], f"declared for Apache Kafka, required by no test of make test: {unproven}"


def test_the_reader_of_the_tests_finds_a_require_call_where_there_is_one():
    # The scan above must not pass by finding nothing: the capability tests are among its finds.
    required = _required_read_in_a_fresh_interpreter()

    assert "tests/integration/sinks/kafka/test_broker_capabilities.py::test_end_txn_with_a_stale_epoch_is_refused_as_fenced" \
        in required["STALE_EPOCH_ERRORS"]
    assert not any("test_run_batch_killed.py" in test for tests in required.values() for test in tests)  # slow ones are left out

"""Tools for people who write onceflow sinks: the conformance kit (``onceflow.testing.conformance``).

Needs pytest (``pip install 'onceflow[testing]'``); imports nothing of
onceflow's dev kit: the sink author's fixtures bring their own real system.
"""

import pytest

# pytest rewrites the asserts of test modules only: without this, a failing kit test of an installed
# onceflow says a bare AssertionError instead of the values it compared.
pytest.register_assert_rewrite("onceflow.testing.conformance")

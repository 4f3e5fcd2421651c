"""Tools for people who write onceflow sinks: the conformance kit (``onceflow.testing.conformance``).

Needs pytest (``pip install 'onceflow[testing]'``); imports nothing of
onceflow's dev kit: the sink author's fixtures bring their own real system.
"""

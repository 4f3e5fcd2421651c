"""The chaos run's guard against a second run on the same home (pure logic: a file lock)."""

from __future__ import annotations

import pytest

from onceflow.config.settings import ConfigurationError
from onceflow_devkit.chaos.runner import ChaosOptions, _Run


def test_a_second_run_on_the_same_home_fails_fast_and_a_run_beside_it_starts(tmp_path):
    # The second would stop the first one's stack and delete its state (its up() starts with that).
    first = _Run(ChaosOptions(1, 1, home=tmp_path / "chaos" / "noida-file"), print)
    first._hold_home()
    second = _Run(ChaosOptions(1, 1, home=tmp_path / "chaos" / "noida-file"), print)
    with pytest.raises(ConfigurationError, match="another chaos run is using .*noida-file .*same --broker and --warehouse"):
        second._hold_home()
    _Run(ChaosOptions(1, 1, broker="tansu", home=tmp_path / "chaos" / "tansu-file"), print)._hold_home()
    first.down()  # the first run ends (in this process: the next run of the combination must start)
    second._hold_home()

"""benchmarks/many_pipelines.py's pure parts: the deployment's shape, its bursts, and the figures."""

from __future__ import annotations

import sys

import pytest

from tests.support import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import many_pipelines as mp  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)


def test_the_deployment_runs_the_same_batches_a_minute_at_every_n():
    for n in (1, 10, 50):
        pipelines = mp.deployment(n, rate_per_min=2)
        assert len({p.name for p in pipelines}) == n and all(p.period_s == 30 * n for p in pipelines)
        assert [p.on_input for p in pipelines[:3]] == [True, False, True][:n]
        assert [p.phase_s for p in pipelines[:3]] == [0, 30, 60][:n]  # one pipeline's turn every 30 s
        arrivals = mp.bursts(pipelines, minutes=10 * n)
        assert 20 * n - n <= len(arrivals) <= 20 * n and all(at < 600 * n for at, _ in arrivals)
        assert [a for a, _ in arrivals] == sorted(a for a, _ in arrivals)


def test_a_scheduled_pipelines_burst_comes_before_its_run():
    _, scheduled = mp.deployment(2, rate_per_min=2)  # unpaused at 30 s, then a run every 60 s
    assert [at for at, p in mp.bursts([scheduled], minutes=3)] == [30 - mp.LEAD_S, 90 - mp.LEAD_S, 150 - mp.LEAD_S]


def test_input_comes_until_every_pipeline_had_its_turn():
    assert mp.run_minutes(1, 1.5, minutes=10) == 10 and mp.run_minutes(50, 2, minutes=10) == 25


def test_the_percentile_is_a_value_of_the_sample():
    values = [float(v) for v in range(1, 101)]
    assert mp.percentile(values, 95) == 95.0 and mp.percentile(values, 50) == 50.0
    assert mp.percentile([3.0, 1.0, 2.0], 95) == 3.0 and mp.percentile([7.0], 50) == 7.0


def test_a_scheduled_runs_due_time_comes_from_its_run_id():
    assert mp.scheduled_at_ms("scheduled__2026-11-27T20:20:00+00:00") == 1795810800000
    assert mp.scheduled_at_ms("scheduled__2026-11-27T20:20:00.500000+00:00_a1b2c3") == 1795810800500
    assert mp.scheduled_at_ms("asset_triggered__2026-11-27T20:20:00+00:00") is None and mp.scheduled_at_ms(None) is None


def test_the_triggers_requests_are_the_clients_above_the_idle_brokers():
    before = mp.parse_requests("Fetch 150\nFetchConsumer 50\nFetchFollower 100\nListOffsets 10\nMetadata 5\n"
                               "BrokerHeartbeat 7\n")
    after = mp.parse_requests("Fetch 250\nFetchConsumer 110\nFetchFollower 140\nListOffsets 70\nMetadata 5\n"
                              "FindCoordinator 3\nBrokerHeartbeat 9\n")
    rate = mp.request_rate(before, after, seconds=10)  # a fetch counted once; the nodes' own requests left out
    assert rate == {"FetchConsumer": 6.0, "ListOffsets": 6.0, "FindCoordinator": 0.3}
    assert mp.beyond(rate, {"ListOffsets": 1.0}) == {"FetchConsumer": 6.0, "ListOffsets": 5.0, "FindCoordinator": 0.3}


@pytest.mark.parametrize("q", [0, 101])
def test_a_percentile_outside_the_range_is_refused(q):
    with pytest.raises(ValueError):
        mp.percentile([1.0], q)


def test_the_growth_names_each_components_share_largest_first():
    results = [{"n": 1, "cpu_s_per_min": {"scheduler": 3.0, "triggerer": 1.0, "workers": 10.0}},
               {"n": 10, "cpu_s_per_min": {"scheduler": 9.0, "triggerer": 3.5, "workers": 10.5}}]
    assert mp.growth(results) == ("from N=1 to N=10 the CPU grew by 9.0 s/min: scheduler +6.0, triggerer +2.5, "
                                  "workers +0.5")

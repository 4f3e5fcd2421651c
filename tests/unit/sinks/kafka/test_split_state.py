"""Where a split stands from what one scan saw (``split_state``): the verdict and the counting of one
partition's share, without a broker."""

from __future__ import annotations

from onceflow.sinks.kafka.handle import PartitionWrite, TxnHandle, handle_headers
from onceflow.sinks.kafka.producing import SplitDeliveries
from onceflow.sinks.kafka.split_state import PartitionShare, PartitionView, SplitState, state_of

HANDLE = TxnHandle("p", "out", "0000000001", 0, "t", "onceflow.p.out.0", 7, 1, 1000, record_format=3)


def _view(original=0, repaired=0, open=False, complete=True, expected=10) -> PartitionView:
    return PartitionView(0, expected, original, repaired, stable_end=12, open=open, complete=complete)


def test_the_verdict_of_a_split_from_its_partitions():
    assert state_of((_view(original=10), _view(original=10))) is SplitState.COMMITTED
    assert state_of((_view(repaired=10),)) is SplitState.REPAIRED
    assert state_of((_view(original=10), _view(open=True))) is SplitState.OPEN  # markers written partition by partition
    assert state_of((_view(original=4),)) is SplitState.INCONSISTENT
    assert state_of((_view(),)) is SplitState.ABORTED
    assert state_of((_view(original=10), _view(complete=False))) is SplitState.UNKNOWN  # decides nothing


def test_a_share_is_whole_once_its_probe_is_visible_and_none_of_it_once_the_stable_offset_passed_it():
    share = PartitionShare(HANDLE, 0, PartitionWrite(first_offset=3, count=5, last_offset=20), exact=False)
    assert share.headers == tuple(handle_headers(HANDLE)) and share.probe == 20
    assert not share.saw(2, is_repair=False)  # an earlier attempt's record, before the first offset
    assert share.saw(20, is_repair=False)     # the probe: atomic in the partition
    assert share.view() == PartitionView(0, 5, 5, 0, 21, False, True)

    ended = PartitionShare(HANDLE, 0, PartitionWrite(3, 5, 20), exact=False)
    assert ended.reached_end(30, wait=False) and ended.view().original == 0 and not ended.view().open


def test_a_share_whose_stable_offset_has_not_passed_its_probe_is_open_now_or_waited_for():
    share = PartitionShare(HANDLE, 0, PartitionWrite(3, 5, 20), exact=False)
    assert not share.stable_known(15, wait=True)  # waiting for the transaction to end
    share.give_up()
    assert share.view().open and share.view().complete  # the broker said so: open, not unknown
    never = PartitionShare(HANDLE, 0, PartitionWrite(3, 5, 20), exact=False)
    never.give_up()
    assert not never.view().complete


def test_an_exact_share_counts_every_original_instead_of_trusting_the_probe():
    share = PartitionShare(HANDLE, 0, PartitionWrite(3, 3, 5), exact=True)
    assert not share.saw(5, is_repair=False)
    assert share.view().original == 1


def test_only_a_partitions_first_row_of_the_split_and_each_batchs_last_rows_ask_for_a_delivery_report():
    deliveries = SplitDeliveries()
    assert deliveries.add([0, 1, 0, 1, 0]) == [0, 1, 3, 4]
    assert deliveries.add([1, 1, 2]) == [1, 2]  # partition 1 is not new; 2 is
    assert deliveries.counts == {0: 3, 1: 4, 2: 1} and deliveries.total == 8
    assert deliveries.unreported() == [0, 1, 2]

"""A former leader's empty epoch at its log end goes when it truncates there as a follower.

Found by compat_tests/test_exactly_once_pipeline.py (EOS_SEED=21): broker 1 was elected leader of a
partition (epoch 1 starting at its log end, 750) and appended nothing before it was paused and lost
the lead; the new leader (epoch 2) never had epoch 1. As a follower, broker 1 fetched with last
fetched epoch 1, was told it diverged at epoch 0 ending at 750, truncated to 750 (its log end: a
no-op that kept epoch 1) and fetched again, twice a second, never rejoining the ISR.
"""
from strom.storage.tests.batches import append, make_batch


def test_truncating_at_the_log_end_drops_an_epoch_that_starts_there(open_log):
    log = open_log()
    append(log, make_batch(3), epoch=0)
    log.leader_epoch_cache.assign(1, log.log_end_offset)  # elected, appended nothing
    assert log.latest_epoch() == 1
    log.truncate_to(3)                                     # the leader: epoch 0 ends at 3
    assert log.log_end_offset == 3 and log.latest_epoch() == 0
    log.truncate_to(5)                                     # past the end: nothing to drop
    assert log.log_end_offset == 3 and log.latest_epoch() == 0
    log.close()
    reopened = open_log()                                  # the checkpoint file agrees
    assert reopened.latest_epoch() == 0


def test_an_epoch_with_records_is_kept(open_log):
    log = open_log()
    append(log, make_batch(3), epoch=0)
    append(log, make_batch(2), epoch=1)
    log.truncate_to(5)
    assert log.log_end_offset == 5 and log.latest_epoch() == 1

"""Issue 27 in the loop itself: a batch larger than the data is refused at once (it once built an index list without
end), and every seed the config accepts seeds the run's generators, giving the numbers it always gave where it
worked before."""

import time

import numpy as np
import pytest
import torch

from trainer.algorithms.rollout import sampling_seed
from trainer.config import SEED_MAX
from trainer.loop import DataOrder, seed_everything


def test_a_batch_larger_than_the_data_is_refused_at_once():
    order = DataOrder(size=16, seed=0)
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"a batch of 9223372036854775808 rows from data of 16 rows"):
        order.next_batch(2**63)
    assert time.perf_counter() - started < 1
    assert order.consumed == 0 and sorted(order.next_batch(16)) == list(range(16))


def test_every_accepted_seed_seeds_the_generators_and_small_seeds_draw_as_before():
    seed_everything(SEED_MAX)
    for seed in (0, 1, 2_000, SEED_MAX):  # 2,000 overflowed the sampling seed's 64 bits before
        torch.Generator().manual_seed(sampling_seed(seed, step=7, round_=1, position=3))
        assert len(DataOrder(size=5, seed=seed).next_batch(5)) == 5
    # what the order drew before the seeds were folded into 64 bits
    expected = torch.randperm(10, generator=torch.Generator().manual_seed(3 * 100_003)).tolist()
    assert DataOrder(size=10, seed=3).next_batch(10) == expected
    seed_everything(12)
    drawn = np.random.rand()
    np.random.seed(12)
    assert np.random.rand() == drawn

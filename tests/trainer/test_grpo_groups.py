"""The seeds' case: an all-equal group gives no gradient; dynamic sampling replaces such groups and logs the
fraction kept; overlong filtering takes truncated completions out of the loss."""

import pytest
import torch

from trainer.algorithms.grpo import GRPOLearner
from trainer.algorithms.losses import group_advantages
from trainer.config import GRPOConfig
from trainer.decoding.generation import HFGenerationBackend
from trainer.loop import build_optimizer, build_scheduler
from trainer.modeling.models import load_policy, load_tokenizer
from trainer.rewards import RewardBreakdown

ALWAYS_RIGHT = "Calculate 0 + 0\n"


class PromptRewards:
    """All-equal rewards for ALWAYS_RIGHT, differing rewards (row parity) for every other prompt."""

    def __call__(self, samples):
        rewards = [1.0 if s.prompt == ALWAYS_RIGHT else float(i % 2) for i, s in enumerate(samples)]
        return RewardBreakdown(total=rewards, per_function={"stub": rewards})


def _learner(model_dir, **overrides) -> GRPOLearner:
    config = GRPOConfig(
        model=model_dir, output_dir="unused", batch_size=2, group_size=4, max_new_tokens=6, beta=0.0,
        max_length=40, max_prompt_length=24, lr=1e-3, **overrides,
    )
    policy = load_policy(model_dir, device=torch.device("cpu"))
    optimizer = build_optimizer(policy, config)
    return GRPOLearner(
        config, policy, None, HFGenerationBackend(policy, load_tokenizer(model_dir)), PromptRewards(), optimizer,
        build_scheduler(optimizer, config, 10),
    )


def _gradient(learner, samples, advantages):
    from trainer.algorithms.logprobs import completion_logprobs
    from trainer.algorithms.losses import policy_loss

    logprobs, _ = completion_logprobs(learner.policy, samples, temperature=1.0)
    mask = samples.completion_mask.float()
    loss, _ = policy_loss(logprobs, samples.logprobs, advantages, mask)
    learner.policy.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in learner.policy.parameters() if p.grad is not None])


def test_a_group_whose_rewards_are_all_equal_contributes_no_gradient(tiny_model):
    learner = _learner(tiny_model)
    samples = learner.backend.generate([ALWAYS_RIGHT, "Calculate 3 + 4\n"], learner.params)
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    advantages = group_advantages(rewards, 4)
    assert advantages[:4].tolist() == [0.0] * 4 and advantages[4:].abs().min() > 0.5

    equal_group_only = samples.select_groups([0])
    gradient = _gradient(learner, equal_group_only, advantages[:4])
    assert torch.count_nonzero(gradient) == 0
    assert torch.count_nonzero(_gradient(learner, samples.select_groups([1]), advantages[4:])) > 0


def test_dynamic_sampling_replaces_uninformative_groups_and_logs_the_fraction(tiny_model):
    learner = _learner(tiny_model, dynamic_sampling=True, max_generation_rounds=3)
    draws = iter([[{"prompt": ALWAYS_RIGHT}, {"prompt": ALWAYS_RIGHT}],
                  [{"prompt": ALWAYS_RIGHT}, {"prompt": "Calculate 1 + 2\n"}],
                  [{"prompt": "Calculate 5 + 1\n"}, {"prompt": ALWAYS_RIGHT}]])
    timings = {}
    scored, sampling = learner.rollout(lambda: next(draws), timings)
    assert [row["prompt"] for row in scored.rows] == ["Calculate 1 + 2\n", "Calculate 5 + 1\n"]
    assert sampling.informative_ratio == pytest.approx(2 / 6) and sampling.rounds == 3
    assert scored.samples.completion_ids.shape[0] == 8 and len(scored.rewards) == 8
    assert timings["time/generation_s"] > 0


def test_without_dynamic_sampling_the_first_batch_is_kept_whatever_its_groups(tiny_model):
    learner = _learner(tiny_model)
    scored, sampling = learner.rollout(
        lambda: [{"prompt": ALWAYS_RIGHT}, {"prompt": "Calculate 1 + 2\n"}], {}
    )
    assert [row["prompt"] for row in scored.rows] == [ALWAYS_RIGHT, "Calculate 1 + 2\n"]
    assert (sampling.informative_ratio, sampling.rounds) == (0.5, 1)


def test_overlong_filtering_leaves_truncated_completions_out_of_the_loss(tiny_model):
    # unpacked like the kept rows below: Adam's first step is about the sign of each gradient, so packing's
    # float rounding (tested on its own in test_shared_prompt) would flip near-zero entries
    learner = _learner(tiny_model, overlong_filtering=True, loss_aggregation="token-mean", share_prompt=False)
    samples = learner.backend.generate(["Calculate 3 + 4\n"], learner.params)
    samples.truncated[:] = torch.tensor([True, False, True, False])
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    before = [p.detach().clone() for p in learner.policy.parameters()]
    with_truncated = learner.update(1, samples, advantages, None)
    after_filtered = [p.detach().clone() for p in learner.policy.parameters()]

    reference = _learner(tiny_model, loss_aggregation="token-mean")
    for parameter, value in zip(reference.policy.parameters(), before, strict=True):
        parameter.data.copy_(value)
    kept = samples.select_rows(torch.tensor([1, 3]))
    reference.update(1, kept, advantages[[1, 3]], None)
    for filtered_value, kept_only in zip(after_filtered, reference.policy.parameters(), strict=True):
        assert torch.allclose(filtered_value, kept_only.detach(), atol=1e-6)
    assert with_truncated["grad_norm"] > 0

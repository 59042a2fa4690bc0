"""The loss contract of trainer/algorithms/losses.py (docs/architecture.md), on hand-made tensors.

Expected values are computed by hand from the formulas; the worked numbers of the seeds
(GRPO 4 of 8 correct, GAE with lambda 0.9, the clip cases, the weather KL) are among them.
"""

import math
import statistics

import pytest
import torch

from trainer.algorithms.losses import (
    bradley_terry_loss,
    dpo_loss,
    entropy_from_logits,
    gae,
    group_advantages,
    informative_groups,
    kl_k3,
    policy_loss,
    soft_overlong_penalty,
    value_loss,
)

GARBAGE = (float("nan"), float("inf"), -1e9)


def _logp(probabilities):
    return torch.tensor(probabilities).log()


def _ragged_batch():
    """A 2x3 batch whose second sequence has one real token, advantages per token, ratio 1 everywhere.

    Per-token losses on real tokens are -A: [-1, -2, -3] and [-4].
    """
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    logp = torch.full((2, 3), -1.0)
    advantages = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    return logp, advantages, mask


def _fill_padding(tensor, mask, value):
    return torch.where(mask.bool(), tensor, torch.full_like(tensor, value))


# group_advantages


def test_grpo_four_correct_of_eight_gives_plus_minus_0_935():
    correct = [1, 0, 0, 1, 1, 0, 1, 0]

    advantages = group_advantages(torch.tensor(correct, dtype=torch.float32), 8)

    unbiased_std = statistics.stdev(correct)  # 0.5345
    assert unbiased_std == pytest.approx(0.5345, abs=1e-4)
    expected = 0.5 / (unbiased_std + 1e-4)  # 0.935 (the seed rounds it to 0.94)
    assert expected == pytest.approx(0.935, abs=1e-3)
    assert advantages.tolist() == pytest.approx([expected if c else -expected for c in correct], abs=1e-6)


def test_advantage_scales_group_batch_none():
    rewards = torch.tensor([1.0, 0.0, 3.0, 1.0])  # groups of 2: means 0.5 and 2
    centered = [0.5, -0.5, 1.0, -1.0]
    group_stds = [statistics.stdev([1, 0])] * 2 + [statistics.stdev([3, 1])] * 2
    batch_std = statistics.stdev([1, 0, 3, 1])

    by_group = group_advantages(rewards, 2, scale="group")
    by_batch = group_advantages(rewards, 2, scale="batch")
    unscaled = group_advantages(rewards, 2, scale="none")

    assert by_group.tolist() == pytest.approx(
        [c / (s + 1e-4) for c, s in zip(centered, group_stds, strict=True)], abs=1e-6
    )
    assert by_batch.tolist() == pytest.approx([c / (batch_std + 1e-4) for c in centered], abs=1e-6)
    assert unscaled.tolist() == pytest.approx(centered, abs=1e-6)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_with_all_equal_rewards_gets_exactly_zero_advantage(scale):
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.1, 1.0, 0.0, 0.0, 0.0])

    advantages = group_advantages(rewards, 4, scale=scale)

    assert torch.equal(advantages[:4], torch.zeros(4))
    assert not advantages.isnan().any()
    assert (advantages[4:] != 0).all()


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_size_one_gives_zero_advantages_not_nan(scale):
    advantages = group_advantages(torch.tensor([0.3, 0.9, 0.0]), 1, scale=scale)

    assert torch.equal(advantages, torch.zeros(3))


def test_informative_groups_are_those_whose_rewards_differ():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])

    assert informative_groups(rewards, 4).tolist() == [True, False, False]


# kl_k3 and entropy


def test_k3_under_the_policy_equals_the_exact_kl_of_the_weather_example():
    policy, reference = [0.6, 0.3, 0.1], [0.7, 0.2, 0.1]
    exact_kl = sum(p * math.log(p / q) for p, q in zip(policy, reference, strict=True))

    k3 = kl_k3(_logp([policy]), _logp([reference]))
    expectation_under_policy = (torch.tensor(policy) * k3[0]).sum().item()

    assert exact_kl == pytest.approx(0.030, abs=1e-3)
    assert expectation_under_policy == pytest.approx(exact_kl, abs=1e-6)


def test_k3_is_never_negative_and_zero_when_policies_agree():
    generator = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 5, generator=generator) * 5
    ref_logp = -torch.rand(4, 5, generator=generator) * 5

    assert (kl_k3(logp, ref_logp) >= 0).all()
    assert torch.equal(kl_k3(logp, logp), torch.zeros(4, 5))


def test_fair_coin_entropy_is_ln_2_nats():
    entropy = entropy_from_logits(torch.zeros(1, 1, 2))

    assert entropy.shape == (1, 1)
    assert entropy.item() == pytest.approx(0.693, abs=1e-3)
    assert entropy.item() == pytest.approx(math.log(2), abs=1e-6)


def test_entropy_is_stable_for_huge_logits():
    logits = torch.tensor([[[1e4, 1e4, -1e4], [3e4, 0.0, 0.0]]])

    entropy = entropy_from_logits(logits)

    assert entropy[0].tolist() == pytest.approx([math.log(2), 0.0], abs=1e-6)


# policy_loss


def test_clipping_caps_ratio_1_8_at_1_2_and_0_4_at_0_8():
    # new / old probabilities 0.9 / 0.5 = 1.8 with A = +1, and 0.2 / 0.5 = 0.4 with A = -1 (eps 0.2)
    logp, old_logp = _logp([[0.9], [0.2]]), _logp([[0.5], [0.5]])
    advantages, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 1)

    loss, metrics = policy_loss(logp, old_logp, advantages, mask, aggregation="token-mean")

    # token losses: -min(1.8, 1.2) = -1.2 and -min(-0.4, -0.8) = 0.8
    assert loss.item() == pytest.approx((-1.2 + 0.8) / 2, abs=1e-6)
    assert metrics["clip_ratio/high"] == pytest.approx(0.5)
    assert metrics["clip_ratio/low"] == pytest.approx(0.5)
    assert metrics["clip_ratio/region"] == pytest.approx(1.0)
    assert metrics["ratio/max"] == pytest.approx(1.8, abs=1e-6)
    assert metrics["ratio/min"] == pytest.approx(0.4, abs=1e-6)
    assert metrics["ratio/mean"] == pytest.approx(1.1, abs=1e-6)
    expected_approx_kl = (0.5 * math.log(1.8) ** 2 + 0.5 * math.log(0.4) ** 2) / 2
    assert metrics["approx_kl"] == pytest.approx(expected_approx_kl, abs=1e-6)
    assert "kl" not in metrics


def test_clipping_never_helps_the_side_that_hurts():
    # ratio 1.8 with A = -1 and 0.4 with A = +1: the unclipped (worse) term is kept, nothing counts as clipped
    logp, old_logp = _logp([[0.9], [0.2]]), _logp([[0.5], [0.5]])

    loss, metrics = policy_loss(logp, old_logp, torch.tensor([-1.0, 1.0]), torch.ones(2, 1))

    assert loss.item() == pytest.approx((1.8 - 0.4) / 2, abs=1e-6)
    assert metrics["clip_ratio/region"] == 0.0


def test_asymmetric_clip_higher():
    logp, old_logp = _logp([[0.9]]), _logp([[0.5]])

    loss, metrics = policy_loss(logp, old_logp, torch.tensor([1.0]), torch.ones(1, 1), eps_high=0.28)

    assert loss.item() == pytest.approx(-1.28, abs=1e-6)
    assert metrics["clip_ratio/high"] == 1.0


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [
        ("sequence-mean", ((-1 - 2 - 3) / 3 + -4 / 1) / 2),  # -3.0
        ("token-mean", (-1 - 2 - 3 - 4) / 4),  # -2.5
        ("constant", (-1 - 2 - 3 - 4) / (2 * 3)),  # -1.667
    ],
)
def test_aggregations_on_a_ragged_batch(aggregation, expected):
    logp, advantages, mask = _ragged_batch()

    loss, _ = policy_loss(logp, logp.clone(), advantages, mask, aggregation=aggregation)

    assert loss.item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("aggregation", ["sequence-mean", "token-mean", "constant"])
def test_padding_changes_nothing_even_with_garbage_in_it(aggregation):
    logp, advantages, mask = _ragged_batch()
    logp = logp + torch.tensor([[0.1, -0.5, 0.3], [0.2, 0.0, 0.0]])
    old_logp = torch.full((2, 3), -1.0)
    ref_logp = torch.full((2, 3), -1.2)
    arguments = {"aggregation": aggregation, "ref_logp": ref_logp, "beta": 0.04}
    clean_loss, clean_metrics = policy_loss(logp, old_logp, advantages, mask, **arguments)

    for value in GARBAGE:
        dirty = [_fill_padding(t, mask, value) for t in (logp, old_logp, advantages, ref_logp)]
        arguments["ref_logp"] = dirty[3]
        loss, metrics = policy_loss(*dirty[:3], mask, **arguments)

        assert loss.item() == pytest.approx(clean_loss.item(), abs=1e-6)
        assert metrics == pytest.approx(clean_metrics, abs=1e-6)


def test_gradient_flows_only_through_real_tokens():
    _, advantages, mask = _ragged_batch()
    logp = _fill_padding(torch.full((2, 3), -1.0), mask, float("nan")).requires_grad_()

    loss, _ = policy_loss(logp, torch.full((2, 3), -1.1), advantages, mask)
    loss.backward()

    assert torch.equal(logp.grad[~mask.bool()], torch.zeros(2))
    assert (logp.grad[mask.bool()] != 0).all()


def test_all_equal_reward_group_contributes_zero_gradient():
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    advantages = group_advantages(rewards, 4)
    logp = torch.full((8, 3), -1.0, requires_grad=True)
    old_logp = torch.full((8, 3), -1.05)

    loss, _ = policy_loss(logp, old_logp, advantages, torch.ones(8, 3), beta=0.0)
    loss.backward()

    assert torch.equal(logp.grad[:4], torch.zeros(4, 3))
    assert (logp.grad[4:] != 0).all()


def test_sequences_without_real_tokens_give_no_nan():
    logp, advantages, mask = _ragged_batch()
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])

    for aggregation in ("sequence-mean", "token-mean", "constant"):
        loss, _ = policy_loss(logp, logp.clone(), advantages, mask, aggregation=aggregation)
        assert loss.isfinite()
    sequence_mean, _ = policy_loss(logp, logp.clone(), advantages, mask)
    assert sequence_mean.item() == pytest.approx(-2.0)  # the empty sequence is left out of the mean

    empty_loss, metrics = policy_loss(logp, logp.clone(), advantages, torch.zeros(2, 3))
    assert empty_loss.item() == 0.0
    assert metrics["clip_ratio/region"] == 0.0
    assert math.isnan(metrics["ratio/mean"])  # no token, no ratio: reported as NaN, not invented


def test_kl_penalty_adds_beta_times_k3():
    # ratio 1 and A = 0, so the loss is the penalty alone; pi = 0.5, pi_ref = 0.25 per token
    logp, ref_logp = _logp([[0.5, 0.5]]), _logp([[0.25, 0.25]])
    k3 = 0.5 - math.log(0.5) - 1  # exp(x) - x - 1 with x = log(0.25 / 0.5)

    loss, metrics = policy_loss(
        logp, logp.clone(), torch.zeros(1), torch.ones(1, 2), ref_logp=ref_logp, beta=0.1
    )

    assert metrics["kl"] == pytest.approx(k3, abs=1e-6)
    assert loss.item() == pytest.approx(0.1 * k3, abs=1e-6)


def test_kl_is_reported_but_not_added_when_beta_is_zero():
    logp, ref_logp = _logp([[0.5]]), _logp([[0.25]])

    loss, metrics = policy_loss(logp, logp.clone(), torch.zeros(1), torch.ones(1, 1), ref_logp=ref_logp)

    assert loss.item() == 0.0
    assert metrics["kl"] > 0


# gae and value_loss


def _seed_gae_episode():
    """Values and rewards whose TD errors are the seed's 1.2, 0.3, 0.8, -0.2 (gamma 1)."""
    values = [1.0, 2.0, 0.5, 1.5]
    deltas = [1.2, 0.3, 0.8, -0.2]
    following = [*values[1:], 0.0]
    rewards = [d - v_next + v for d, v_next, v in zip(deltas, following, values, strict=True)]
    return rewards, values


def test_gae_seed_example_lambda_0_9_gives_1_972():
    rewards, values = _seed_gae_episode()

    advantages, returns = gae(torch.tensor([rewards]), torch.tensor([values]), torch.ones(1, 4), lam=0.9)

    # backwards: -0.2; 0.8 + 0.9 * -0.2 = 0.62; 0.3 + 0.9 * 0.62 = 0.858; 1.2 + 0.9 * 0.858 = 1.9722
    assert advantages[0].tolist() == pytest.approx([1.9722, 0.858, 0.62, -0.2], abs=1e-5)
    assert advantages[0, 0].item() == pytest.approx(1.972, abs=1e-3)
    assert returns[0].tolist() == pytest.approx([1.9722 + 1.0, 0.858 + 2.0, 0.62 + 0.5, -0.2 + 1.5], abs=1e-5)


def test_gae_ignores_right_padding_and_zeroes_it():
    rewards, values = _seed_gae_episode()
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]])
    padded_rewards = torch.tensor([[*rewards, 0.0, 0.0], [*rewards, 0.0, 0.0]])
    padded_values = torch.tensor([[*values, 0.0, 0.0], [*values, 0.0, 0.0]])

    for value in GARBAGE:
        advantages, returns = gae(
            _fill_padding(padded_rewards, mask, value),
            _fill_padding(padded_values, mask, value),
            mask,
            lam=0.9,
        )

        assert advantages[0, :4].tolist() == pytest.approx([1.9722, 0.858, 0.62, -0.2], abs=1e-5)
        # the second sequence ends after two tokens: delta_1 = r_1 + 0 - V_1 = 1.8 - 2.0
        assert advantages[1, :2].tolist() == pytest.approx([0.2 + 2.0 - 1.0 + 0.9 * -0.2, -0.2], abs=1e-5)
        assert torch.equal(advantages[~mask.bool()], torch.zeros(6))
        assert torch.equal(returns[~mask.bool()], torch.zeros(6))


def test_gae_with_discount():
    # delta_1 = 1 + 0 - 2 = -1; delta_0 = 0 + 0.5 * 2 - 1 = 0; A_0 = 0 + 0.5 * 1.0 * -1
    advantages, returns = gae(
        torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 2.0]]), torch.ones(1, 2), gamma=0.5, lam=1.0
    )

    assert advantages[0].tolist() == pytest.approx([-0.5, -1.0])
    assert returns[0].tolist() == pytest.approx([0.5, 1.0])


def test_value_loss_takes_the_worse_of_clipped_and_unclipped_error():
    # v = 1.0, old v = 0.5, clip 0.2 -> clipped v = 0.7.
    # R = 2: errors 1.0 and 1.69 -> 1.69 (clipping does not let the update count); R = 0: 1.0 and 0.49 -> 1.0
    mask = torch.tensor([[1, 1, 0]])
    values = _fill_padding(torch.tensor([[1.0, 1.0, 0.0]]), mask, float("nan"))
    old_values = torch.tensor([[0.5, 0.5, 7.0]])
    returns = torch.tensor([[2.0, 0.0, -3.0]])

    loss = value_loss(values, old_values, returns, mask, clip=0.2)

    assert loss.item() == pytest.approx(0.5 * (1.69 + 1.0) / 2, abs=1e-6)


# dpo_loss and bradley_terry_loss


@pytest.mark.parametrize(("loss_type", "expected"), [("sigmoid", math.log(2)), ("hinge", 1.0), ("ipo", 25.0)])
def test_dpo_when_policy_equals_reference(loss_type, expected):
    logps = torch.tensor([-5.0, -2.0])

    losses, chosen_rewards, rejected_rewards = dpo_loss(logps, logps, logps, logps, loss_type=loss_type)

    # D = 0: sigmoid -logsigmoid(0) = ln 2; hinge relu(1 - 0); ipo (0 - 1 / (2 * 0.1))^2
    assert losses.tolist() == pytest.approx([expected, expected], abs=1e-6)
    assert torch.equal(chosen_rewards, torch.zeros(2))
    assert torch.equal(rejected_rewards, torch.zeros(2))


def _dpo_pair_with_margin_2(**kwargs):
    # D = (-1 - -2) - (-3 - -2) = 2
    chosen, rejected = torch.tensor([-1.0], requires_grad=True), torch.tensor([-3.0], requires_grad=True)
    return dpo_loss(chosen, rejected, torch.tensor([-2.0]), torch.tensor([-2.0]), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"beta": 0.5}, math.log1p(math.exp(-1.0))),  # -logsigmoid(0.5 * 2)
        (
            {"beta": 0.5, "label_smoothing": 0.1},
            0.9 * math.log1p(math.exp(-1.0)) + 0.1 * math.log1p(math.exp(1.0)),
        ),
        ({"beta": 0.25, "loss_type": "hinge"}, 0.5),  # relu(1 - 0.25 * 2)
        ({"beta": 0.5, "loss_type": "hinge"}, 0.0),  # relu(1 - 1)
        ({"beta": 0.5, "loss_type": "ipo"}, 1.0),  # (2 - 1 / (2 * 0.5))^2
        ({"beta": 0.25, "loss_type": "ipo"}, 0.0),  # (2 - 2)^2
    ],
)
def test_dpo_loss_types_by_hand(kwargs, expected):
    losses, _, _ = _dpo_pair_with_margin_2(**kwargs)

    assert losses.item() == pytest.approx(expected, abs=1e-6)


def test_dpo_rewards_are_beta_times_log_ratios_and_detached():
    losses, chosen_rewards, rejected_rewards = _dpo_pair_with_margin_2(beta=0.5)

    assert chosen_rewards.item() == pytest.approx(0.5)  # 0.5 * (-1 - -2)
    assert rejected_rewards.item() == pytest.approx(-0.5)  # 0.5 * (-3 - -2)
    assert losses.requires_grad
    assert not chosen_rewards.requires_grad
    assert not rejected_rewards.requires_grad


def test_bradley_terry_plain_weighted_margin_and_centered():
    chosen, rejected = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 1.0])
    pair_losses = [math.log1p(math.exp(-2.0)), math.log1p(math.exp(1.0))]  # -logsigmoid(2), -logsigmoid(-1)

    plain = bradley_terry_loss(chosen, rejected)
    weighted = bradley_terry_loss(chosen, rejected, weights=torch.tensor([3.0, 1.0]))
    with_margin = bradley_terry_loss(chosen, rejected, margin=torch.tensor([1.0, 0.0]))
    centered = bradley_terry_loss(chosen, rejected, center_coef=0.01)

    assert plain.item() == pytest.approx(sum(pair_losses) / 2, abs=1e-6)
    assert weighted.item() == pytest.approx((3 * pair_losses[0] + pair_losses[1]) / 4, abs=1e-6)
    assert with_margin.item() == pytest.approx((math.log1p(math.exp(-1.0)) + pair_losses[1]) / 2, abs=1e-6)
    # (c + r)^2 = 4 and 1, mean 2.5
    assert centered.item() == pytest.approx(sum(pair_losses) / 2 + 0.01 * 2.5, abs=1e-6)


# soft_overlong_penalty


def test_soft_overlong_penalty_regions_and_boundaries():
    # max 20, cache 4: free up to 16, a linear ramp to -1 at 20, -1 beyond
    lengths = torch.tensor([10, 16, 17, 18, 20, 21, 100])

    penalty = soft_overlong_penalty(lengths, max_length=20, cache_length=4)

    assert penalty.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0])


# invalid arguments


def _valid_policy_inputs():
    return torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), torch.ones(2, 3)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: group_advantages(torch.zeros(8), 3), "group_size"),
        (lambda: group_advantages(torch.zeros(8), 0), "group_size"),
        (lambda: group_advantages(torch.zeros(8), 4, scale="std"), "scale"),
        (lambda: informative_groups(torch.zeros(6), 4), "group_size"),
        (lambda: policy_loss(*_valid_policy_inputs(), aggregation="seq-mean"), "aggregation"),
        (lambda: policy_loss(*_valid_policy_inputs(), beta=0.04), "ref_logp"),
        (
            lambda: policy_loss(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2), torch.ones(2, 3)),
            "old_logp",
        ),
        (
            lambda: policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3)),
            "advantages",
        ),
        (lambda: policy_loss(*_valid_policy_inputs(), eps_low=-0.1), "eps_low"),
        (lambda: gae(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), lam=1.5), "lam"),
        (
            lambda: value_loss(
                torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), clip=-1
            ),
            "clip",
        ),
        (lambda: dpo_loss(*[torch.zeros(2)] * 4, loss_type="kto"), "loss_type"),
        (lambda: dpo_loss(*[torch.zeros(2)] * 4, beta=0.0), "beta"),
        (lambda: dpo_loss(*[torch.zeros(2)] * 4, loss_type="ipo", label_smoothing=0.1), "label_smoothing"),
        (lambda: dpo_loss(*[torch.zeros(2)] * 4, label_smoothing=0.7), "label_smoothing"),
        (
            lambda: bradley_terry_loss(torch.zeros(2), torch.zeros(2), weights=torch.tensor([1.0, -1.0])),
            "weights",
        ),
        (lambda: bradley_terry_loss(torch.zeros(2), torch.zeros(2), margin=torch.zeros(3)), "margin"),
        (lambda: soft_overlong_penalty(torch.tensor([5]), max_length=20, cache_length=0), "cache_length"),
        (lambda: soft_overlong_penalty(torch.tensor([5]), max_length=3, cache_length=4), "max_length"),
    ],
)
def test_invalid_arguments_raise_value_error_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()

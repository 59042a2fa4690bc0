"""losses.kto_loss and kto_kl on hand-made numbers (KTO eq. 7)."""

import math

import pytest
import torch

from trainer.algorithms.losses import kto_kl, kto_loss


def test_desirable_and_undesirable_losses_against_the_reference_point():
    logps, ref_logps = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.5])
    losses, rewards = kto_loss(logps, ref_logps, torch.tensor([True, False]), torch.tensor(0.2), beta=1.0,
                               desirable_weight=2.0, undesirable_weight=0.5)
    sigmoid = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    # desirable: log-ratio 0.5 above z0 = 0.2; undesirable: log-ratio -0.5, so z0 - r = 0.7
    assert losses.tolist() == pytest.approx([2.0 * (1 - sigmoid(0.3)), 0.5 * (1 - sigmoid(0.7))])
    assert rewards.tolist() == pytest.approx([0.5, -0.5])
    assert not rewards.requires_grad


def test_the_kl_estimate_is_a_detached_mean_clamped_at_zero():
    policy = torch.tensor([-3.0, -1.0], requires_grad=True)
    assert kto_kl(policy, torch.tensor([-4.0, -1.5])).item() == pytest.approx(0.75)
    assert not kto_kl(policy, torch.tensor([-4.0, -1.5])).requires_grad
    assert kto_kl(policy, torch.tensor([-2.0, -1.0])).item() == 0.0


def test_only_the_policy_log_probs_get_a_gradient_and_bad_arguments_are_refused():
    logps = torch.tensor([-1.0, -2.0], requires_grad=True)
    losses, _ = kto_loss(logps, torch.zeros(2), torch.tensor([True, False]), torch.tensor(0.0))
    losses.sum().backward()
    # a desirable row's loss falls as its log-prob rises, an undesirable row's as its log-prob falls
    assert logps.grad[0] < 0 < logps.grad[1]
    with pytest.raises(ValueError, match="beta must be > 0"):
        kto_loss(logps, torch.zeros(2), torch.tensor([True, False]), torch.tensor(0.0), beta=0.0)
    with pytest.raises(ValueError, match="kl must be a scalar"):
        kto_loss(logps, torch.zeros(2), torch.tensor([True, False]), torch.zeros(2))

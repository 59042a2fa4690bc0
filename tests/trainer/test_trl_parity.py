"""Our policy_loss aggregations equal TRL GRPOTrainer._compute_loss for grpo, bnpo, dapo and dr_grpo.

TRL's method runs on a stand-in `self` carrying only the attributes it reads, with the per-token log-probs
handed in directly, so both sides see exactly the same tensors.
"""

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from trainer.algorithms.losses import policy_loss

trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")

MAX_COMPLETION_LENGTH = 6
OUR_AGGREGATION = {"grpo": "sequence-mean", "bnpo": "token-mean", "dapo": "token-mean", "dr_grpo": "constant"}


class _Accelerator:
    num_processes = 1
    sync_gradients = True

    @staticmethod
    def gather(tensor):
        return tensor

    gather_for_metrics = gather

    @staticmethod
    def reduce(tensor, reduction="sum"):
        return tensor


def _trl_loss(loss_type, batch, *, beta, eps_low, eps_high):
    logp = batch["logp"]
    stand_in = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (logp, torch.zeros_like(logp), None),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=beta,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        loss_type=loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        use_vllm=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=MAX_COMPLETION_LENGTH,
        accelerator=_Accelerator(),
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        _metrics={"train": defaultdict(list)},
    )
    inputs = {
        "prompt_ids": torch.zeros(logp.shape[0], 2, dtype=torch.long),
        "prompt_mask": torch.ones(logp.shape[0], 2, dtype=torch.long),
        "completion_ids": torch.zeros(logp.shape, dtype=torch.long),
        "completion_mask": batch["mask"],
        "advantages": batch["advantages"],
        "old_per_token_logps": batch["old_logp"],
        "ref_per_token_logps": batch["ref_logp"],
        "num_items_in_batch": batch["mask"].sum(),
    }
    return trl_grpo.GRPOTrainer._compute_loss(stand_in, None, inputs), stand_in._metrics["train"]


@pytest.fixture
def batch():
    generator = torch.Generator().manual_seed(0)
    rows = 8
    old_logp = -torch.rand(rows, MAX_COMPLETION_LENGTH, generator=generator) * 3
    lengths = torch.tensor([6, 3, 5, 1, 6, 2, 4, 6])
    return {
        "logp": (old_logp + torch.randn(old_logp.shape, generator=generator) * 0.5).requires_grad_(),
        "old_logp": old_logp,
        "ref_logp": old_logp + torch.randn(old_logp.shape, generator=generator) * 0.2,
        "advantages": torch.randn(rows, generator=generator),
        "mask": (torch.arange(MAX_COMPLETION_LENGTH)[None] < lengths[:, None]).long(),
    }


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize(("beta", "eps_high"), [(0.0, 0.2), (0.04, 0.28)])
def test_loss_and_gradient_match_trl(batch, loss_type, beta, eps_high):
    trl_loss, trl_metrics = _trl_loss(loss_type, batch, beta=beta, eps_low=0.2, eps_high=eps_high)
    (trl_grad,) = torch.autograd.grad(trl_loss, batch["logp"])
    ours, metrics = policy_loss(
        batch["logp"],
        batch["old_logp"],
        batch["advantages"],
        batch["mask"],
        eps_low=0.2,
        eps_high=eps_high,
        ref_logp=batch["ref_logp"] if beta else None,
        beta=beta,
        aggregation=OUR_AGGREGATION[loss_type],
    )
    (our_grad,) = torch.autograd.grad(ours, batch["logp"])
    assert ours.item() == pytest.approx(trl_loss.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose(our_grad, trl_grad, atol=1e-6)
    assert metrics["clip_ratio/low"] == pytest.approx(trl_metrics["clip_ratio/low_mean"][0])
    assert metrics["clip_ratio/high"] == pytest.approx(trl_metrics["clip_ratio/high_mean"][0])
    if beta:
        assert metrics["kl"] == pytest.approx(trl_metrics["kl"][0], rel=1e-5)


def test_the_batch_really_exercises_clipping(batch):
    _, metrics = policy_loss(batch["logp"], batch["old_logp"], batch["advantages"], batch["mask"])
    assert metrics["clip_ratio/low"] > 0 and metrics["clip_ratio/high"] > 0

"""The losses and advantage estimators of every algorithm, as pure tensor functions with their shapes in the docstring.

Shapes: B = sequences, T = completion tokens, V = vocabulary. `mask` [B, T] is 1 on real completion
tokens and 0 on padding. Padding may hold any value, even NaN or inf: every function replaces it with 0
before computing, so padding changes neither the results nor the gradients.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

ADVANTAGE_SCALES = ("group", "batch", "none")
AGGREGATIONS = ("sequence-mean", "token-mean", "constant")
DPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")


def _same_shape(**tensors: Tensor) -> None:
    (first_name, first), *rest = tensors.items()
    for name, tensor in rest:
        if tensor.shape != first.shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)} but {first_name} has shape {tuple(first.shape)}"
            )


def _token_mask(mask: Tensor) -> Tensor:
    if mask.dim() != 2:
        raise ValueError(f"mask must have shape [B, T]; got shape {tuple(mask.shape)}")
    return mask.bool()


def _real_tokens(values: Tensor, real: Tensor) -> Tensor:
    """`values` with every padding position set to 0 (where, not multiply: NaN * 0 is NaN)."""
    return torch.where(real, values, torch.zeros_like(values))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of `values` [B, T] over the tokens where `mask` [B, T] is nonzero; 0 when there are none.
    Padding is left out with where, not by multiplying with the mask, so a NaN on padding stays out."""
    real = mask.bool()
    return _real_tokens(values, real).sum() / real.sum().clamp(min=1)


def _groups(rewards: Tensor, group_size: int) -> Tensor:
    """rewards [B] as [B // group_size, group_size], consecutive groups."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive integer; got {group_size!r}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must have shape [B]; got shape {tuple(rewards.shape)}")
    if rewards.numel() % group_size != 0:
        raise ValueError(f"rewards has {rewards.numel()} elements, not a multiple of group_size={group_size}")
    return rewards.view(-1, group_size)


def informative_groups(rewards: Tensor, group_size: int) -> Tensor:
    """Which groups carry a learning signal (DAPO dynamic sampling).

    rewards [B], consecutive groups of `group_size` -> bool [B // group_size]:
    True for a group whose rewards are not all equal (an all-equal group has advantage 0 everywhere).
    """
    grouped = _groups(rewards, group_size)
    return (grouped != grouped[:, :1]).any(dim=1)


def group_advantages(rewards: Tensor, group_size: int, *, scale: str = "group", eps: float = 1e-4) -> Tensor:
    """Group-relative advantages (GRPO): A_i = (r_i - mean_group(r)) / (std + eps).

    rewards [B], consecutive groups of `group_size` -> advantages [B].
    std is the unbiased (Bessel) std, as torch.std. scale:
      "group": std of the group (GRPO);
      "batch": std of the whole batch, mean still per group (Dr. GRPO ablation, TRL scale_rewards="batch");
      "none":  only subtract the group mean (Dr. GRPO).
    A group whose rewards are all equal gets exactly 0, and so does every sequence when group_size is 1.
    """
    _choice("scale", scale, ADVANTAGE_SCALES)
    if eps < 0:
        raise ValueError(f"eps must be >= 0; got {eps}")
    grouped = _groups(rewards, group_size)
    if not rewards.is_floating_point():
        grouped = grouped.to(torch.get_default_dtype())
    if group_size == 1:
        # The std of one element is NaN; a lone sample has nothing to be compared with.
        return torch.zeros_like(grouped).view(-1)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    if scale == "group":
        centered = centered / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale == "batch":
        centered = centered / (grouped.std() + eps)
    # The mean of equal floats can differ from them by rounding; an all-equal group must be exactly 0.
    informative = informative_groups(rewards, group_size).unsqueeze(1)
    return torch.where(informative, centered, torch.zeros_like(centered)).view(-1)


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(policy || reference), unbiased and never negative.

    logp, ref_logp [B, T] (log-probs of the sampled tokens) -> [B, T]:
    exp(ref_logp - logp) - (ref_logp - logp) - 1.
    """
    _same_shape(logp=logp, ref_logp=ref_logp)
    log_ratio = ref_logp - logp
    # expm1(x) - x is the same value without cancelling 1s; rounding can still dip just below 0.
    return (torch.expm1(log_ratio) - log_ratio).clamp(min=0)


def aggregation_units(mask: Tensor, aggregation: str) -> Tensor:
    """What policy_loss's `aggregation` averages a batch over: its real tokens ("token-mean"), its sequences
    with at least one real token ("sequence-mean") or all its B * T positions ("constant"). A batch split into
    micro-batches weights each one's loss by its share of these units, so the parts sum to the whole."""
    real = mask.bool()
    if aggregation == "token-mean":
        return real.sum()
    if aggregation == "sequence-mean":
        return (real.sum(dim=1) > 0).sum()
    return torch.tensor(real.numel(), device=real.device)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ref_logp: Tensor | None = None,
    beta: float = 0.0,
    aggregation: str = "sequence-mean",
) -> tuple[Tensor, dict[str, float]]:
    """Clipped surrogate loss of PPO / GRPO / DAPO, with an optional k3 KL penalty.

    logp, old_logp, mask, ref_logp [B, T]; advantages [B] (one per sequence) or [B, T].
    ratio = exp(logp - old_logp); per token
        l_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) + beta * kl_k3(logp, ref_logp)
    aggregation over real tokens:
      "sequence-mean": mean over sequences of each sequence's token mean (GRPO); a sequence with no real
                       token (e.g. removed by overlong filtering) is left out;
      "token-mean":    sum / number of real tokens in the batch (DAPO);
      "constant":      sum / (B * T), T = mask.shape[1] (Dr. GRPO).
    Returns the scalar loss and detached metrics over real tokens: "clip_ratio/low" (ratio < 1 - eps_low
    with A < 0), "clip_ratio/high" (ratio > 1 + eps_high with A > 0), "clip_ratio/region" (their sum),
    "ratio/mean", "ratio/max", "ratio/min" (NaN when there is no real token), "approx_kl"
    (mean of 0.5 * (logp - old_logp)^2) and "kl" (mean k3, only when ref_logp is given).
    """
    _choice("aggregation", aggregation, AGGREGATIONS)
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"eps_low and eps_high must be >= 0; got eps_low={eps_low}, eps_high={eps_high}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0; got {beta}")
    if beta > 0 and ref_logp is None:
        raise ValueError(f"beta={beta} > 0 needs ref_logp (the reference model's log-probs)")
    real = _token_mask(mask)
    _same_shape(mask=mask, logp=logp, old_logp=old_logp)
    if ref_logp is not None:
        _same_shape(mask=mask, ref_logp=ref_logp)
    if advantages.dim() == 1 and advantages.shape[0] == mask.shape[0]:
        advantages = advantages.unsqueeze(1).expand_as(logp)
    elif advantages.shape != mask.shape:
        raise ValueError(
            f"advantages must have shape [B] or [B, T] = {tuple(mask.shape)}; got {tuple(advantages.shape)}"
        )

    logp, old_logp, advantages = (_real_tokens(x, real) for x in (logp, old_logp, advantages))
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    clipped_ratio = ratio.clamp(1 - eps_low, 1 + eps_high)
    per_token = -torch.min(ratio * advantages, clipped_ratio * advantages)
    kl = None
    if ref_logp is not None:
        kl = kl_k3(logp, _real_tokens(ref_logp, real))
        if beta > 0:
            per_token = per_token + beta * kl
    per_token = _real_tokens(per_token, real)

    if aggregation == "sequence-mean":
        per_token = per_token.sum(dim=1) / real.sum(dim=1).clamp(min=1)  # each sequence's token mean
    loss = per_token.sum() / aggregation_units(real, aggregation).clamp(min=1)

    with torch.no_grad():
        clipped_low = (ratio < 1 - eps_low) & (advantages < 0)
        clipped_high = (ratio > 1 + eps_high) & (advantages > 0)
        real_ratios = ratio[real]
        no_tokens = real_ratios.numel() == 0
        metrics = {
            "clip_ratio/low": masked_mean(clipped_low.float(), real).item(),
            "clip_ratio/high": masked_mean(clipped_high.float(), real).item(),
            "clip_ratio/region": masked_mean((clipped_low | clipped_high).float(), real).item(),
            "ratio/mean": float("nan") if no_tokens else real_ratios.mean().item(),
            "ratio/max": float("nan") if no_tokens else real_ratios.max().item(),
            "ratio/min": float("nan") if no_tokens else real_ratios.min().item(),
            "approx_kl": masked_mean(0.5 * log_ratio.square(), real).item(),
        }
        if kl is not None:
            metrics["kl"] = masked_mean(kl, real).item()
    return loss, metrics


@torch.no_grad()
def gae(
    rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 0.95
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over right-padded token sequences (PPO).

    rewards, values, mask [B, T] -> (advantages, returns), [B, T] each, no gradient (they are targets).
    delta_t = r_t + gamma * V_{t+1} - V_t with V = 0 past the last real token;
    A_t = delta_t + gamma * lam * A_{t+1}; returns = A + V; both 0 where mask is 0.
    """
    if not (0 <= gamma <= 1):
        raise ValueError(f"gamma must be in [0, 1]; got {gamma}")
    if not (0 <= lam <= 1):
        raise ValueError(f"lam must be in [0, 1]; got {lam}")
    real = _token_mask(mask)
    _same_shape(mask=mask, rewards=rewards, values=values)
    rewards, values = _real_tokens(rewards, real), _real_tokens(values, real)
    following_values = F.pad(values[:, 1:], (0, 1))
    deltas = rewards + gamma * following_values - values
    advantage_after = torch.zeros_like(deltas[:, 0])
    advantages_reversed = []
    for t in reversed(range(deltas.shape[1])):
        advantage_after = _real_tokens(deltas[:, t] + gamma * lam * advantage_after, real[:, t])
        advantages_reversed.append(advantage_after)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    return advantages, _real_tokens(advantages + values, real)


def value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, *, clip: float = 0.2
) -> Tensor:
    """Clipped value (critic) loss of PPO.

    values, old_values, returns, mask [B, T] -> scalar:
    0.5 * mean over real tokens of max((v - R)^2, (old_v + clamp(v - old_v, -clip, clip) - R)^2).
    """
    if clip < 0:
        raise ValueError(f"clip must be >= 0; got {clip}")
    real = _token_mask(mask)
    _same_shape(mask=mask, values=values, old_values=old_values, returns=returns)
    values, old_values, returns = (_real_tokens(x, real) for x in (values, old_values, returns))
    clipped_values = old_values + (values - old_values).clamp(-clip, clip)
    squared_errors = torch.max((values - returns).square(), (clipped_values - returns).square())
    return 0.5 * masked_mean(squared_errors, real)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the next-token distribution: logits [B, T, V] -> [B, T], H = -sum_v p_v log p_v.

    Computed from log_softmax (a logsumexp), so large logits neither overflow nor lose precision.
    """
    if logits.dim() == 0:
        raise ValueError("logits must end with a vocabulary dimension, e.g. shape [B, T, V]; got a scalar")
    return entropy_from_logprobs(torch.log_softmax(logits, dim=-1))


def entropy_from_logprobs(log_probs: Tensor) -> Tensor:
    """Entropy from normalised log-probs [B, T, V] (a log_softmax already computed) -> [B, T]."""
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def dpo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    *,
    beta: float = 0.1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Direct preference optimisation losses per pair (DPO, cDPO, hinge / SLiC, IPO).

    The four log-probs [B] are summed over completion tokens (IPO: callers pass length-averaged ones);
    reference-free DPO passes zeros as the reference log-probs.
    D = (chosen - ref_chosen) - (rejected - ref_rejected);
      "sigmoid": -(1 - ls) * logsigmoid(beta * D) - ls * logsigmoid(-beta * D)   (cDPO when ls > 0)
      "hinge":   relu(1 - beta * D)
      "ipo":     (D - 1 / (2 * beta))^2
    Returns (losses [B], not reduced; chosen_rewards [B]; rejected_rewards [B]) with the detached
    implicit rewards beta * (logps - ref_logps).
    """
    _choice("loss_type", loss_type, DPO_LOSS_TYPES)
    if beta <= 0:
        raise ValueError(f"beta must be > 0; got {beta}")
    if not (0 <= label_smoothing <= 0.5):
        raise ValueError(f"label_smoothing must be in [0, 0.5]; got {label_smoothing}")
    if label_smoothing > 0 and loss_type != "sigmoid":
        raise ValueError(f"label_smoothing applies only to loss_type='sigmoid'; got loss_type={loss_type!r}")
    _same_shape(
        chosen_logps=chosen_logps,
        rejected_logps=rejected_logps,
        ref_chosen_logps=ref_chosen_logps,
        ref_rejected_logps=ref_rejected_logps,
    )
    chosen_log_ratios = chosen_logps - ref_chosen_logps
    rejected_log_ratios = rejected_logps - ref_rejected_logps
    preference = chosen_log_ratios - rejected_log_ratios
    if loss_type == "sigmoid":
        agree, disagree = F.logsigmoid(beta * preference), F.logsigmoid(-beta * preference)
        losses = -(1 - label_smoothing) * agree - label_smoothing * disagree
    elif loss_type == "hinge":
        losses = torch.relu(1 - beta * preference)
    else:
        losses = (preference - 1 / (2 * beta)).square()
    return losses, beta * chosen_log_ratios.detach(), beta * rejected_log_ratios.detach()


def kto_kl(kl_logps: Tensor, ref_kl_logps: Tensor) -> Tensor:
    """KTO's reference point z0 (Ethayarajh et al. 2024, eq. 7, as TRL's KTOTrainer estimates it): the batch mean of
    the policy's log-ratio to the reference on mismatched (prompt, another row's completion) sequences.

    kl_logps, ref_kl_logps [B] (summed completion log-probs) -> a scalar, detached (z0 is a baseline, not a term to
    descend) and clamped at 0 (a KL is never negative; the estimate can be).
    """
    _same_shape(kl_logps=kl_logps, ref_kl_logps=ref_kl_logps)
    return (kl_logps - ref_kl_logps).mean().detach().clamp(min=0)


def kto_loss(
    logps: Tensor,
    ref_logps: Tensor,
    labels: Tensor,
    kl: Tensor,
    *,
    beta: float = 0.1,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Kahneman-Tversky optimisation losses per row (KTO, eq. 7; TRL's loss_type "kto").

    logps, ref_logps [B] summed completion log-probs; labels [B] bool (True: desirable); kl: the scalar reference
    point (kto_kl). With r = logps - ref_logps:
      desirable:   desirable_weight * (1 - sigmoid(beta * (r - kl)))
      undesirable: undesirable_weight * (1 - sigmoid(beta * (kl - r)))
    Returns (losses [B], not reduced, in the rows' order; rewards [B], the detached implicit rewards beta * r).
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0; got {beta}")
    if desirable_weight < 0 or undesirable_weight < 0:
        raise ValueError(f"the weights must be >= 0; got {desirable_weight}, {undesirable_weight}")
    _same_shape(logps=logps, ref_logps=ref_logps, labels=labels)
    if kl.dim() != 0:
        raise ValueError(f"kl must be a scalar; got shape {tuple(kl.shape)}")
    desirable = labels.bool()
    log_ratios = logps - ref_logps
    utility = torch.where(desirable, log_ratios - kl, kl - log_ratios)
    weights = torch.where(desirable, desirable_weight, undesirable_weight).to(log_ratios.dtype)
    return weights * (1 - torch.sigmoid(beta * utility)), beta * log_ratios.detach()


def bradley_terry_loss(
    chosen_scores: Tensor,
    rejected_scores: Tensor,
    *,
    margin: Tensor | None = None,
    weights: Tensor | None = None,
    center_coef: float = 0.0,
) -> Tensor:
    """Reward-model loss on preference pairs (InstructGPT; margin as Llama 2; centering as TRL).

    chosen_scores, rejected_scores, margin, weights [B] -> scalar:
    l_i = -logsigmoid(c_i - r_i - margin_i); sum(w * l) / sum(w) (plain mean without weights)
    + center_coef * mean((c + r)^2), which keeps the scores near 0.
    """
    if chosen_scores.dim() != 1:
        raise ValueError(f"chosen_scores must have shape [B]; got shape {tuple(chosen_scores.shape)}")
    if center_coef < 0:
        raise ValueError(f"center_coef must be >= 0; got {center_coef}")
    _same_shape(chosen_scores=chosen_scores, rejected_scores=rejected_scores)
    score_gaps = chosen_scores - rejected_scores
    if margin is not None:
        _same_shape(chosen_scores=chosen_scores, margin=margin)
        score_gaps = score_gaps - margin
    losses = -F.logsigmoid(score_gaps)
    if weights is None:
        loss = losses.mean()
    else:
        _same_shape(chosen_scores=chosen_scores, weights=weights)
        if (weights < 0).any() or weights.sum() <= 0:
            raise ValueError("weights must be >= 0 with a positive sum")
        loss = (weights * losses).sum() / weights.sum()
    if center_coef > 0:
        loss = loss + center_coef * (chosen_scores + rejected_scores).square().mean()
    return loss


def soft_overlong_penalty(lengths: Tensor, *, max_length: int, cache_length: int) -> Tensor:
    """DAPO's soft overlong punishment, a reward term in [-1, 0].

    lengths [B] (completion tokens) -> [B]; with L_exp = max_length - cache_length:
    0 when L <= L_exp; (L_exp - L) / cache_length when L_exp < L <= max_length; -1 when L > max_length.
    """
    if cache_length <= 0:
        raise ValueError(f"cache_length must be > 0; got {cache_length}")
    if max_length < cache_length:
        raise ValueError(f"max_length must be >= cache_length={cache_length}; got {max_length}")
    if lengths.dim() != 1:
        raise ValueError(f"lengths must have shape [B]; got shape {tuple(lengths.shape)}")
    if not lengths.is_floating_point():
        lengths = lengths.to(torch.get_default_dtype())
    expected_length = max_length - cache_length
    # The ramp reaches -1 exactly at max_length, so clamping it gives all three regions.
    return ((expected_length - lengths) / cache_length).clamp(-1.0, 0.0)

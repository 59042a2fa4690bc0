"""Our KTO step equals TRL 1.16's KTOTrainer on the same batch: the same tiny model and reference, the same rows in
the same order (TRL's sequential batches), so the same KL completions (each prompt with the previous row's
completion). TRL's loss comes from its own compute_loss on the first batch its dataloader gives; the loss, KL,
rewards and log-probs agree within 1e-5, and so does every weight's gradient."""

import shutil

import pytest
import torch

from trainer.algorithms.kto import KTOObjective
from trainer.builtin_datasets import arithmetic
from trainer.formats.data import Limits, mismatched_pairs, tokenize_unpaired
from trainer.kinds import config_from_dict
from trainer.modeling.models import Reference

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

MAX_LENGTH = 64
ROWS = 8


@pytest.fixture(scope="module")
def models(tiny_model, tmp_path_factory):
    """Two directories with the same tokenizer and different weights: each is the other's reference."""
    from transformers import AutoModelForCausalLM

    other = tmp_path_factory.mktemp("kto-parity") / "other"
    shutil.copytree(tiny_model, other)
    model = AutoModelForCausalLM.from_pretrained(other)
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model.save_pretrained(other)
    return str(tiny_model), str(other)


def _rows():
    """Three desirable and five undesirable rows (not balanced, so the weights tell), of varied lengths."""
    rows = arithmetic.thumbs_rows(2, "train", 4)
    return [{key: row[key] for key in ("prompt", "completion", "label")} for row in rows][: ROWS - 2] + [
        {"prompt": "Calculate 1 + 1\n", "completion": "<answer>3</answer>", "label": False},
        {"prompt": "Calculate 9 * 9 - 8\n", "completion": "<think>9 * 9 = 81</think><answer>1</answer>", "label": False},
    ]


def _trl_step(policy_dir, reference_dir, rows, *, beta, desirable_weight, undesirable_weight, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    args = trl.KTOConfig(
        output_dir=str(tmp_path / "trl"), per_device_train_batch_size=len(rows), max_length=MAX_LENGTH, beta=beta,
        desirable_weight=desirable_weight, undesirable_weight=undesirable_weight, use_cpu=True, report_to="none",
        bf16=False, disable_tqdm=True, seed=0, dataloader_num_workers=0,
    )
    trainer = trl.KTOTrainer(
        model=policy_dir, ref_model=AutoModelForCausalLM.from_pretrained(reference_dir), args=args,
        train_dataset=datasets.Dataset.from_list(rows), processing_class=AutoTokenizer.from_pretrained(policy_dir),
    )
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch)
    metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    loss.backward()
    return loss.item(), metrics, batch, _gradients(trainer.model)


def _our_step(policy_dir, reference_dir, rows, *, beta, desirable_weight, undesirable_weight, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = config_from_dict("kto", {
        "model": policy_dir, "output_dir": str(tmp_path / "ours"), "batch_size": len(rows), "beta": beta,
        "desirable_weight": desirable_weight, "undesirable_weight": undesirable_weight, "max_length": MAX_LENGTH,
        "max_prompt_length": MAX_LENGTH // 2,
    })
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    examples = tokenize_unpaired(rows, tokenizer, Limits(MAX_LENGTH, MAX_LENGTH // 2))
    policy = AutoModelForCausalLM.from_pretrained(policy_dir)
    reference = AutoModelForCausalLM.from_pretrained(reference_dir).eval()
    objective = KTOObjective(policy, examples, config, pad_token_id=tokenizer.pad_token_id,
                             reference=Reference(reference))
    indices = list(range(len(rows)))
    (output,) = objective.micro_batches(indices, [indices])
    output.loss.backward()
    return output.loss.item(), output.metrics, examples, _gradients(policy)


def _gradients(model):
    return {name: parameter.grad for name, parameter in model.named_parameters()}


@pytest.mark.parametrize("swap", [False, True], ids=["kl-positive-or-clamped", "swapped"])
@pytest.mark.parametrize(("beta", "desirable_weight", "undesirable_weight"), [(0.1, 1.0, 1.0), (0.5, 1.33, 0.8)])
def test_kto_loss_rewards_and_kl_equal_trl_on_the_same_batch(models, tmp_path, swap, beta, desirable_weight,
                                                            undesirable_weight):
    policy_dir, reference_dir = reversed(models) if swap else models
    rows = _rows()
    options = {"beta": beta, "desirable_weight": desirable_weight, "undesirable_weight": undesirable_weight,
               "tmp_path": tmp_path}
    trl_loss, trl_metrics, trl_batch, trl_gradients = _trl_step(policy_dir, reference_dir, rows, **options)
    our_loss, our_metrics, examples, our_gradients = _our_step(policy_dir, reference_dir, rows, **options)

    # the same sequences: each row's own, and TRL's KL sequence (its prompt, the previous row's completion)
    for prefix, side in (("", "chosen"), ("KL_", "rejected")):
        for row, pair in enumerate(mismatched_pairs(examples, max_length=MAX_LENGTH)):
            ids = getattr(pair, side).input_ids
            assert trl_batch[f"{prefix}input_ids"][row, : len(ids)].tolist() == ids
            assert int(trl_batch[f"{prefix}attention_mask"][row].sum()) == len(ids)

    assert our_loss == pytest.approx(trl_loss, abs=1e-5)
    assert our_metrics["kl"] == pytest.approx(trl_metrics["kl"], abs=1e-5)
    for name in ("rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected"):
        assert our_metrics[name] == pytest.approx(trl_metrics[name], abs=1e-5 * max(1.0, abs(trl_metrics[name])))
    assert our_metrics["rewards/margin"] == pytest.approx(trl_metrics["rewards/margins"], abs=1e-5)
    # every weight's gradient within 1e-4 of its tensor's largest: float32 sums over tokens in another order differ
    # by ~1e-6 on an embedding whose gradient reaches 0.07 (seen on 2026-12-02's packages), beyond an atol of 1e-6
    for name, gradient in trl_gradients.items():
        assert torch.allclose(our_gradients[name], gradient, rtol=1e-4, atol=1e-4 * float(gradient.abs().max())), name


def test_one_direction_of_the_pair_of_models_has_a_positive_kl(models, tmp_path):
    """So the parity above covers a KL term that moves the loss, not only one clamped to 0."""
    rows = _rows()
    kls = [
        _our_step(policy, reference, rows, beta=0.1, desirable_weight=1.0, undesirable_weight=1.0,
                  tmp_path=tmp_path)[1]["kl"]
        for policy, reference in (models, tuple(reversed(models)))
    ]
    assert max(kls) > 0.1 and min(kls) == 0.0

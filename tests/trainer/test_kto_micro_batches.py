"""A KTO step split into micro-batches logs the same rewards and log-probs of its desirable and undesirable rows as
in one piece (each micro-batch estimates its own KL, as TRL's KTOTrainer does per device batch); LoRA's reference is
the policy with its adapters off."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.algorithms import kto
from trainer.algorithms.kto import KTOObjective
from trainer.builtin_datasets import arithmetic
from trainer.formats.data import Limits, tokenize_unpaired
from trainer.kinds import config_from_dict
from trainer.modeling.models import Reference
from trainer.sink import MemorySink


def _step_metrics(objective, indices, chunks):
    totals = {}
    for output in objective.micro_batches(indices, chunks):
        for name, value in output.metrics.items():
            totals[name] = totals.get(name, 0.0) + value / len(chunks)
    return totals


def test_the_rewards_are_the_steps_means_however_it_is_split(tiny_model, tmp_path):
    # thumbs_rows alternate up and down: this order leaves 3 desirable rows in one half and 1 in the other
    rows = arithmetic.thumbs_rows(1, "train", 4)
    rows = [rows[0], rows[2], rows[4], rows[1], rows[6], rows[3], rows[5], rows[7]]
    config = config_from_dict("kto", {"model": tiny_model, "output_dir": str(tmp_path), "batch_size": 8,
                                      "max_length": 64, "max_prompt_length": 24})
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    policy = AutoModelForCausalLM.from_pretrained(tiny_model)
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    objective = KTOObjective(policy, tokenize_unpaired(rows, tokenizer, Limits(64, 24)), config,
                             pad_token_id=tokenizer.pad_token_id,
                             reference=Reference(AutoModelForCausalLM.from_pretrained(tiny_model).eval()))
    indices = list(range(8))
    whole = _step_metrics(objective, indices, [indices])
    split = _step_metrics(objective, indices, [indices[:4], indices[4:]])
    for name in ("rewards/chosen", "rewards/rejected", "rewards/margin", "logps/chosen", "logps/rejected"):
        assert split[name] == pytest.approx(whole[name], rel=1e-5, abs=1e-7), name
    assert whole["rewards/chosen"] != 0


def test_a_lora_kto_run_trains_against_its_adapters_off(tiny_model, tmp_path):
    config = config_from_dict("kto", {"model": tiny_model, "output_dir": str(tmp_path), "use_lora": True,
                                      "lr": 1e-3, "max_steps": 2, "batch_size": 4, "grad_accum_steps": 2,
                                      "max_length": 64, "max_prompt_length": 24})
    sink = MemorySink()
    kto.train(config, arithmetic.thumbs_rows(1, "train", 4), sink)
    first, last = sink.metrics[1], sink.metrics[2]
    # at step 1 the policy is its reference: every log-ratio, so every reward, is 0
    assert first["rewards/chosen"] == 0 and first["rewards/rejected"] == 0 and first["loss"] == pytest.approx(0.5)
    assert last["rewards/chosen"] != 0

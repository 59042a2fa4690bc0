"""A GRPO group packed behind one copy of its prompt gives the numbers of G separate sequences."""

import pytest
import torch
from transformers import (
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from tests.trainer.tiny_decoders import make_matter, tiny_decoder
from trainer.algorithms.grpo import micro_batch, micro_batch_rows, train
from trainer.algorithms.logprobs import completion_logprobs
from trainer.builtin_datasets import arithmetic
from trainer.decoding.generation import GroupSamples
from trainer.kinds import config_from_dict
from trainer.modeling.models import LoraOptions, load_policy
from trainer.modeling.selective_forward import hidden_states_at
from trainer.modeling.shared_prefix import pack_groups, packing_groups_pays
from trainer.sink import MemorySink

PROMPTS = ["Calculate 2 + 2\n", "Calculate 11 + 22 + 33 + 44 + 55\n"]  # different lengths: left padding
GROUP, WIDTH = 3, 6
# real lengths of the completions (the rest is padding), one ending at its first token
LENGTHS = [6, 1, 4, 3, 6, 2]


def _samples(tokenizer, vocab_size: int) -> GroupSamples:
    encoded = tokenizer(PROMPTS, padding=True, padding_side="left", return_tensors="pt")
    generator = torch.Generator().manual_seed(0)
    completion_ids = torch.randint(3, vocab_size, (len(LENGTHS), WIDTH), generator=generator)
    completion_mask = (torch.arange(WIDTH)[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    return GroupSamples(
        prompt_ids=encoded["input_ids"],
        prompt_mask=encoded["attention_mask"],
        completion_ids=completion_ids.masked_fill(completion_mask == 0, tokenizer.pad_token_id),
        completion_mask=completion_mask,
        truncated=torch.zeros(len(LENGTHS), dtype=torch.bool),
        logprobs=torch.zeros(len(LENGTHS), WIDTH),
        texts=[""] * len(LENGTHS),
        group_size=GROUP,
    )


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


def _both_ways(model, samples: GroupSamples) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(log-probs, entropy on real tokens, gradient) with and without the shared prompt."""
    # otherwise both ways would run unpacked
    assert packing_groups_pays(model, samples.prompt_ids.shape[1], samples.completion_ids.shape[1], samples.group_size)
    weights = torch.linspace(-1.0, 1.0, samples.completion_ids.numel()).view_as(samples.logprobs)
    results = []
    for share_prompt in (True, False):
        model.zero_grad()
        logprobs, entropy = completion_logprobs(
            model, samples, temperature=0.7, with_entropy=True, share_prompt=share_prompt
        )
        (logprobs * weights).sum().backward()
        gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((logprobs.detach(), entropy[samples.completion_mask.bool()], gradient))
    return results


def _assert_same(results) -> None:
    (logprobs, entropy, gradient), (expected_logprobs, expected_entropy, expected_gradient) = results
    torch.testing.assert_close(logprobs, expected_logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, expected_entropy, atol=1e-5, rtol=1e-5)
    assert gradient.abs().max() > 0
    torch.testing.assert_close(gradient, expected_gradient, atol=1e-5, rtol=1e-4)


def test_pack_groups_lays_out_the_prompt_once_then_each_completion():
    samples = GroupSamples(
        prompt_ids=torch.tensor([[0, 5, 6]]),
        prompt_mask=torch.tensor([[0, 1, 1]]),
        completion_ids=torch.tensor([[7, 8], [9, 0]]),
        completion_mask=torch.tensor([[1, 1], [1, 0]]),
        truncated=torch.zeros(2, dtype=torch.bool),
        logprobs=torch.zeros(2, 2),
        texts=["", ""],
        group_size=2,
    )
    packed = pack_groups(samples.prompt_ids, samples.prompt_mask, samples.completion_ids, samples.completion_mask)
    assert packed.input_ids.tolist() == [[0, 5, 6, 7, 8, 9, 0]]
    # both completions continue at position 2, where the two-token prompt ends
    assert packed.position_ids.tolist() == [[0, 0, 1, 2, 3, 2, 3]]
    # 7 and 9 are predicted at the prompt's last token (2); 8 at 7 (3); the padding slot reads 9 (5)
    assert packed.read.tolist() == [[2, 3, 2, 5]]
    allowed = packed.allowed[0, 0]
    assert allowed[5, 1] and allowed[5, 2] and not allowed[5, 0]  # the prompt, not its left padding
    assert not allowed[5, 3] and not allowed[5, 4]  # completion 2 does not see completion 1
    assert allowed[4, 3] and not allowed[3, 4]  # causal within a completion


def test_policy_logprobs_entropy_and_gradients_match_separate_sequences(tiny_model, tokenizer):
    model = load_policy(tiny_model)
    _assert_same(_both_ways(model, _samples(tokenizer, model.config.vocab_size)))


@pytest.mark.parametrize("variant", ["lora", "eager", "gradient_checkpointing"])
def test_lora_eager_attention_and_checkpointing_match(tiny_model, tokenizer, variant):
    if variant == "lora":
        model = load_policy(tiny_model, lora=LoraOptions(r=4, alpha=8, dropout=0.0, target_modules=("all-linear",)))
        make_matter(model, "lora_B")
    else:
        model = load_policy(tiny_model, gradient_checkpointing=variant == "gradient_checkpointing")
        if variant == "eager":
            model.set_attn_implementation("eager")
    _assert_same(_both_ways(model, _samples(tokenizer, model.config.vocab_size)))


@pytest.mark.parametrize(
    ("config_class", "model_class"), [(Qwen2Config, Qwen2ForCausalLM), (Qwen3Config, Qwen3ForCausalLM)]
)
def test_qwen_biases_head_norms_and_grouped_keys_match(tokenizer, config_class, model_class):
    model = tiny_decoder(config_class, model_class)
    _assert_same(_both_ways(model, _samples(tokenizer, model.config.vocab_size)))


def test_micro_batches_keep_whole_groups(tokenizer):
    samples = _samples(tokenizer, 384)
    assert [rows.tolist() for rows in micro_batch_rows(6, 2, GROUP)] == [[0, 1, 2], [3, 4, 5]]
    assert micro_batch(samples, torch.tensor([3, 4, 5])).group_size == GROUP
    # more micro-batches than groups: rows, each with its own prompt copy
    assert [rows.tolist() for rows in micro_batch_rows(6, 3, GROUP)] == [[0, 1], [2, 3], [4, 5]]
    assert micro_batch(samples, torch.tensor([2, 3])).group_size == 1


def test_grpo_runs_the_same_with_and_without_the_shared_prompt(tiny_model, tmp_path, monkeypatch):
    packed = []
    monkeypatch.setattr("trainer.algorithms.logprobs.pack_groups", lambda *args: packed.append(True) or pack_groups(*args))
    runs = []
    for share_prompt in (True, False):
        config = config_from_dict("grpo", {
            "model": tiny_model, "output_dir": str(tmp_path / str(share_prompt)), "lr": 1e-3, "max_steps": 3,
            "batch_size": 2, "group_size": 4, "grad_accum_steps": 2, "max_new_tokens": 8, "max_length": 40,
            "max_prompt_length": 24, "rewards": {"format_tags": 1.0, "length_penalty": 0.5},
            "share_prompt": share_prompt,
        })
        sink = MemorySink()
        train(config, arithmetic.sft_rows(1, "train", 20), sink)
        runs.append(sink.metrics)
    assert packed  # the shared-prompt run did pack its groups
    for step in (1, 2, 3):
        for name in ("loss", "kl", "entropy", "grad_norm", "reward/mean"):
            assert runs[0][step][name] == pytest.approx(runs[1][step][name], rel=1e-4, abs=1e-6), (step, name)


def test_groups_are_packed_only_where_it_saves_work(tiny_model):
    model = load_policy(tiny_model)  # hidden 64, as measured in ATTENTION_COST_PER_MULTIPLY_ADD's comment
    assert packing_groups_pays(model, prompt_width=230, completion_width=16, group=8)
    assert packing_groups_pays(model, prompt_width=230, completion_width=64, group=8)
    assert packing_groups_pays(model, prompt_width=32, completion_width=16, group=8)
    assert packing_groups_pays(model, prompt_width=64, completion_width=16, group=8)
    assert not packing_groups_pays(model, prompt_width=8, completion_width=16, group=8)
    assert not packing_groups_pays(model, prompt_width=8, completion_width=64, group=8)
    assert not packing_groups_pays(model, prompt_width=64, completion_width=64, group=8)


@pytest.mark.parametrize(
    ("config_class", "model_class"), [(LlamaConfig, LlamaForCausalLM), (Qwen3Config, Qwen3ForCausalLM)]
)
def test_block_attention_equals_the_whole_row_mask(tokenizer, config_class, model_class):
    """A packed group's layers attend block by block (prompt; each completion behind the prompt): the hidden
    states at every position, padding included, and the gradients equal those of the whole-row mask."""
    model = tiny_decoder(config_class, model_class)
    samples = _samples(tokenizer, model.config.vocab_size)
    packed = pack_groups(samples.prompt_ids, samples.prompt_mask, samples.completion_ids, samples.completion_mask)
    every_position = torch.arange(packed.input_ids.shape[1]).expand(packed.input_ids.shape[0], -1)
    results = []
    for blocks in (packed.blocks, None):
        model.zero_grad()
        hidden = hidden_states_at(
            model, packed.input_ids, packed.allowed, packed.position_ids, every_position, blocks=blocks
        )
        (hidden * torch.linspace(-1, 1, hidden.numel()).view_as(hidden)).sum().backward()
        results.append((hidden.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])))
    (hidden, gradient), (expected_hidden, expected_gradient) = results
    torch.testing.assert_close(hidden, expected_hidden, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gradient, expected_gradient, atol=1e-5, rtol=1e-4)

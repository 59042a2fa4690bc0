"""Packing a pair into one sequence with a shared prefix gives the numbers of two separate sequences."""

import pytest
import torch
from transformers import (
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from tests.trainer.tiny_decoders import make_matter, tiny_decoder
from trainer.algorithms.logprobs import sequence_logps
from trainer.formats.data import Limits, PairExample, SequenceExample, collate_pairs, tokenize_pairs
from trainer.modeling.models import LoraOptions, load_policy, load_reward_model
from trainer.modeling.shared_prefix import (
    pack_pairs,
    packed_pair_scores,
    packed_sequence_logps,
    shared_length,
    supports_shared_prefix,
)

ROWS = [
    # the answers differ after a long common reasoning prefix
    {"prompt": "Calculate 6 * 8 * 3\n", "chosen": "<think>6 * 8 = 48; 48 * 3 = 144</think><answer>144</answer>",
     "rejected": "<think>6 * 8 = 48; 48 * 3 = 144</think><answer>147</answer>"},
    # they differ at the first completion token, with different lengths
    {"prompt": "Calculate 2 + 2\n", "chosen": "<answer>4</answer>", "rejected": "5"},
    # identical completions: each keeps one token of its own (the EOS)
    {"prompt": "Calculate 9 - 1\n", "chosen": "<answer>8</answer>", "rejected": "<answer>8</answer>"},
    # a longer prompt than the others, so rows have different prefix lengths and padding
    {"prompt": "Calculate 1 + 2 + 3 + 4 + 5\n", "chosen": "<answer>15</answer>", "rejected": "<answer>14</answer>"},
]


@pytest.fixture(scope="module")
def pairs(tiny_model) -> list[PairExample]:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    return tokenize_pairs(ROWS, tokenizer, Limits(max_length=64, max_prompt_length=32), add_eos=True)


def test_shared_length_leaves_each_sequence_a_token_of_its_own():
    assert shared_length([1, 2, 3, 4], [1, 2, 5]) == 2
    assert shared_length([1, 2, 3], [1, 2, 3]) == 2
    assert shared_length([1, 2], [1, 2, 3, 4]) == 1
    assert shared_length([7], [8]) == 0


def test_packed_rows_are_shorter_than_two_sequences(pairs):
    packed = pack_pairs(pairs, pad_token_id=0)
    separate = collate_pairs(pairs, pad_token_id=0)
    assert packed.input_ids.numel() < separate.input_ids.numel()
    assert packed.sequence_tokens == separate.tokens


def _logps_both_ways(model, pairs, *, average=False):
    separate = collate_pairs(pairs, pad_token_id=0)
    expected, expected_lengths = sequence_logps(model, separate, average=average)
    actual, lengths = packed_sequence_logps(model, pack_pairs(pairs, pad_token_id=0), average=average)
    assert torch.equal(lengths, expected_lengths)
    return actual, expected


@pytest.mark.parametrize("average", [False, True])
def test_policy_logps_and_gradients_match_separate_sequences(tiny_model, pairs, average):
    model = load_policy(tiny_model)
    actual, expected = _logps_both_ways(model, pairs, average=average)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)

    grads = []
    for value in (actual, expected):
        model.zero_grad()
        (value * torch.arange(1, len(value) + 1)).sum().backward(retain_graph=True)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-4)


def test_lora_policy_matches_separate_sequences(tiny_model, pairs):
    model = load_policy(tiny_model, lora=LoraOptions(r=4, alpha=8, dropout=0.0, target_modules=("all-linear",)))
    make_matter(model, "lora_B")
    assert supports_shared_prefix(model)
    actual, expected = _logps_both_ways(model, pairs)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_reward_model_scores_match_the_classifier_on_each_sequence(tiny_model, pairs):
    model = load_reward_model(tiny_model, pad_token_id=0).eval()
    assert supports_shared_prefix(model)
    chosen, rejected = packed_pair_scores(model, pack_pairs(pairs, pad_token_id=0))
    with torch.no_grad():
        for index, pair in enumerate(pairs):
            for sequence, score in ((pair.chosen, chosen[index]), (pair.rejected, rejected[index])):
                alone = model(input_ids=torch.tensor([sequence.input_ids])).logits[0, 0]
                torch.testing.assert_close(score, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("config_class", "model_class"), [(Qwen2Config, Qwen2ForCausalLM), (Qwen3Config, Qwen3ForCausalLM)]
)
def test_qwen_attention_biases_head_norms_and_grouped_keys_match(pairs, config_class, model_class):
    model = tiny_decoder(config_class, model_class)
    assert supports_shared_prefix(model)
    actual, expected = _logps_both_ways(model, pairs)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_other_architectures_keep_two_sequences():
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    assert not supports_shared_prefix(gpt2)
    windowed = Qwen2ForCausalLM(
        Qwen2Config(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                    num_key_value_heads=1, use_sliding_window=True, sliding_window=8)
    )
    assert not supports_shared_prefix(windowed)
    assert supports_shared_prefix(LlamaForCausalLM(LlamaConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )))


def test_a_pair_whose_prompt_fills_the_row_still_packs():
    pair = PairExample(SequenceExample([5, 6, 7], 2), SequenceExample([5, 6, 8, 9], 2), 1.0, 0.0)
    packed = pack_pairs([pair], pad_token_id=0)
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 9]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 2, 3]]
    # chosen token 7 is predicted at 1; rejected 8 at 1 (the shared prefix end) and 9 at packed 3
    assert packed.predict_positions.tolist() == [[1, 0], [1, 3]]
    assert packed.completion_mask.tolist() == [[1, 0], [1, 1]]
    assert not packed.allowed[0, 0, 3, 2]  # the rejected suffix does not see the chosen one


def test_eager_attention_takes_the_additive_mask(tiny_model, pairs):
    model = load_policy(tiny_model)
    model.set_attn_implementation("eager")
    assert model.model.config._attn_implementation == "eager"
    actual, expected = _logps_both_ways(model, pairs)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_lora_reward_model_scores_match_the_classifier(tiny_model, pairs):
    lora = LoraOptions(r=4, alpha=8, dropout=0.0, target_modules=("all-linear",))
    model = load_reward_model(tiny_model, pad_token_id=0, lora=lora).eval()
    make_matter(model, "lora_B", "modules_to_save")  # the adapters and the trained head
    assert supports_shared_prefix(model)
    chosen, rejected = packed_pair_scores(model, pack_pairs(pairs, pad_token_id=0))
    with torch.no_grad():
        separate = model(input_ids=torch.tensor([pairs[0].chosen.input_ids])).logits[0, 0]
    torch.testing.assert_close(chosen[0], separate, atol=1e-5, rtol=1e-5)
    assert chosen.requires_grad and rejected.requires_grad


def test_gradient_checkpointing_gives_the_same_values_and_gradients(tiny_model, pairs):
    results = []
    for checkpointing in (False, True):
        model = load_policy(tiny_model, gradient_checkpointing=checkpointing)
        logps, _ = packed_sequence_logps(model, pack_pairs(pairs, pad_token_id=0))
        logps.sum().backward()
        results.append((logps.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])))
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(results[0][1], results[1][1], atol=1e-5, rtol=1e-4)

"""Group sampling: greedy equals transformers' generate, log-probs equal a full forward, EOS and truncation."""

import pytest
import torch

from tests.trainer.tiny_decoders import make_matter
from trainer.algorithms.logprobs import completion_logprobs
from trainer.builtin_datasets.arithmetic import build_tiny_model
from trainer.decoding.fast_decode import KVDecoder, supports_fast_decode
from trainer.decoding.generation import (
    HFGenerationBackend,
    SamplingParams,
    concat_samples,
    filter_top_k_top_p,
)
from trainer.modeling.models import LoraOptions, load_policy, load_tokenizer

PROMPTS = ["Calculate 2 + 2 * 6\n", "Calculate 7 + 1\n", "Calculate 13 - 4 * 2 + 19\n"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("generation-model"))


@pytest.fixture(scope="module", params=["fast", "transformers"])
def backend(request, model_dir):
    model = load_policy(str(model_dir), device=torch.device("cpu"))
    return HFGenerationBackend(model, load_tokenizer(str(model_dir)), fast_decode=request.param == "fast")


@pytest.fixture(scope="module")
def transformers_backend(model_dir):
    """Decoding through the model's own forward, so a test can reach its logits."""
    model = load_policy(str(model_dir), device=torch.device("cpu"))
    return HFGenerationBackend(model, load_tokenizer(str(model_dir)), fast_decode=False)


@pytest.mark.parametrize("new_tokens", [14, 70])
def test_the_fast_decoder_samples_what_the_transformers_forward_samples(model_dir, new_tokens):
    model = load_policy(str(model_dir), device=torch.device("cpu"))
    tokenizer = load_tokenizer(str(model_dir))
    assert supports_fast_decode(model)
    outputs = []
    for fast in (True, False):
        torch.manual_seed(3)
        params = SamplingParams(group_size=5, max_new_tokens=new_tokens, temperature=1.0, min_new_tokens=new_tokens)
        outputs.append(HFGenerationBackend(model, tokenizer, fast_decode=fast).generate(PROMPTS, params))
    fast, reference = outputs
    assert torch.equal(fast.completion_ids, reference.completion_ids)
    torch.testing.assert_close(fast.logprobs, reference.logprobs, atol=1e-5, rtol=1e-5)
    assert torch.equal(fast.truncated, reference.truncated)


def test_greedy_equals_transformers_generate(backend):
    samples = backend.generate(PROMPTS, SamplingParams(group_size=1, max_new_tokens=12, temperature=0))
    encoded = backend.tokenizer(PROMPTS, padding=True, padding_side="left", return_tensors="pt")
    reference = backend.model.generate(
        **encoded, max_new_tokens=12, do_sample=False, pad_token_id=backend.pad_token_id, top_k=None, top_p=None
    )[:, encoded["input_ids"].shape[1] :]
    width = samples.completion_ids.shape[1]
    assert torch.equal(samples.completion_ids, reference[:, :width])


def test_top_k_one_is_greedy_for_every_member_of_the_group(backend):
    greedy = backend.generate(PROMPTS, SamplingParams(group_size=1, max_new_tokens=8, temperature=0))
    top1 = backend.generate(PROMPTS, SamplingParams(group_size=4, max_new_tokens=8, temperature=0.7, top_k=1))
    assert torch.equal(top1.completion_ids, greedy.completion_ids.repeat_interleave(4, dim=0))


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sampling_logprobs_equal_a_full_forward_at_the_same_temperature(backend, temperature):
    torch.manual_seed(0)
    params = SamplingParams(group_size=4, max_new_tokens=10, temperature=temperature, top_k=50, top_p=0.9)
    samples = backend.generate(PROMPTS, params)
    with torch.no_grad():
        recomputed, _ = completion_logprobs(backend.model, samples, temperature=temperature)
    assert samples.completion_ids.shape == (12, samples.logprobs.shape[1])
    assert torch.allclose(recomputed, samples.logprobs, atol=1e-4)
    assert (samples.logprobs[samples.completion_mask == 0] == 0).all()


def test_prefill_happens_once_per_prompt_not_per_completion(backend, monkeypatch):
    batch_sizes = []
    if backend.fast_decode:
        original = KVDecoder.forward

        def recording_forward(self, input_ids, key_bias):
            batch_sizes.append(tuple(input_ids.shape))
            return original(self, input_ids, key_bias)

        monkeypatch.setattr(KVDecoder, "forward", recording_forward)
        hook = None
    else:
        hook = backend.model.register_forward_pre_hook(
            lambda module, args, kwargs: batch_sizes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
        )
    try:
        backend.generate(PROMPTS, SamplingParams(group_size=8, max_new_tokens=3))
    finally:
        if hook is not None:
            hook.remove()
    prefill, *decode = batch_sizes
    assert prefill[0] == len(PROMPTS) and prefill[1] > 1
    assert all(shape == (len(PROMPTS) * 8, 1) for shape in decode)


def test_completion_mask_and_truncation_from_a_forced_eos(transformers_backend, monkeypatch):
    backend = transformers_backend
    eos = backend.eos_token_id
    original_forward = backend.model.forward
    calls = {"n": 0}

    def forward_with_eos_on_third_step_for_odd_rows(*args, **kwargs):
        output = original_forward(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 3:  # prefill, decode 1, decode 2 -> the logits that choose token index 2
            output.logits[1::2, -1, :] = -1e4
            output.logits[1::2, -1, eos] = 1e4
        return output

    monkeypatch.setattr(backend.model, "forward", forward_with_eos_on_third_step_for_odd_rows)
    torch.manual_seed(0)
    samples = backend.generate(PROMPTS[:2], SamplingParams(group_size=2, max_new_tokens=5, temperature=1.0))
    odd, even = samples.completion_mask[1::2], samples.completion_mask[0::2]
    assert odd.tolist() == [[1, 1, 1, 0, 0]] * 2
    assert (samples.completion_ids[1::2, 2] == eos).all()
    assert (samples.completion_ids[1::2, 3:] == backend.pad_token_id).all()
    has_eos = (samples.completion_ids == eos).any(dim=1)
    assert samples.truncated.tolist() == (~has_eos).tolist()
    assert not samples.truncated[1::2].any()
    first_eos = (samples.completion_ids == eos).long().argmax(dim=1)
    assert samples.completion_mask.sum(dim=1).tolist() == torch.where(has_eos, first_eos + 1, 5).tolist()
    assert even.shape == (2, 5)


def test_the_batch_stops_when_every_sequence_has_ended(transformers_backend, monkeypatch):
    backend = transformers_backend
    eos = backend.eos_token_id
    original_forward = backend.model.forward

    def forward_always_eos(*args, **kwargs):
        output = original_forward(*args, **kwargs)
        output.logits[:, -1, eos] = 1e4
        return output

    monkeypatch.setattr(backend.model, "forward", forward_always_eos)
    samples = backend.generate(PROMPTS, SamplingParams(group_size=3, max_new_tokens=20))
    assert samples.completion_ids.shape == (9, 1)
    assert samples.completion_mask.tolist() == [[1]] * 9
    assert not samples.truncated.any()
    assert samples.texts == [""] * 9


def test_top_k_and_top_p_keep_only_the_most_likely_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isfinite(filter_top_k_top_p(logits, top_k=2, top_p=1.0)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_top_k_top_p(logits, top_k=0, top_p=0.7)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_top_k_top_p(logits, top_k=0, top_p=0.1)).tolist() == [[True, False, False, False]]


def test_concat_and_select_keep_whole_groups(backend):
    params = SamplingParams(group_size=2, max_new_tokens=4)
    first, second = backend.generate(PROMPTS[:1], params), backend.generate(PROMPTS[1:], params)
    joined = concat_samples([first, second], pad_token_id=backend.pad_token_id)
    assert joined.prompt_ids.shape[0] == 3 and joined.completion_ids.shape[0] == 6
    kept = joined.select_groups([1])
    with torch.no_grad():
        recomputed, _ = completion_logprobs(backend.model, kept, temperature=1.0)
    assert torch.allclose(recomputed, kept.logprobs, atol=1e-4)
    assert kept.texts == joined.texts[2:4]
    rows = joined.select_rows(torch.tensor([5, 0]))
    assert rows.group_size == 1 and torch.equal(rows.prompt_ids, joined.prompt_ids[[2, 0]])
    with torch.no_grad():
        assert torch.allclose(completion_logprobs(backend.model, rows, temperature=1.0)[0], rows.logprobs, atol=1e-4)


def test_bad_sampling_parameters_are_refused():
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="group_size"):
        SamplingParams(group_size=0)


@pytest.mark.parametrize(
    ("top_k", "top_p", "expected"),
    [(0, 1.0, [0.5, 0.3, 0.15, 0.05]), (2, 1.0, [0.625, 0.375, 0, 0]), (0, 0.9, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0])],
)
def test_sampled_tokens_follow_the_truncated_distribution(top_k, top_p, expected):
    from trainer.decoding.generation import _sample_next

    torch.manual_seed(0)
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])).expand(40_000, 4)
    tokens, logprobs = _sample_next(logits, SamplingParams(temperature=1.0, top_k=top_k, top_p=top_p))
    frequencies = torch.bincount(tokens, minlength=4).float() / tokens.numel()
    assert frequencies.tolist() == pytest.approx(expected, abs=0.01)
    assert torch.allclose(logprobs, logits.log_softmax(-1).gather(1, tokens[:, None]).squeeze(1))


def test_a_banned_token_is_never_drawn_and_still_counts_in_the_logprobs():
    """min_new_tokens bans the end tokens while drawing; the recorded log-probs stay those of the whole
    distribution (what the training forward computes), so the ratio stays 1."""
    from trainer.decoding.generation import _sample_next

    torch.manual_seed(0)
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])).expand(40_000, 4)
    tokens, logprobs = _sample_next(logits, SamplingParams(temperature=1.0), banned=torch.tensor([0]))
    frequencies = torch.bincount(tokens, minlength=4).float() / tokens.numel()
    assert frequencies.tolist() == pytest.approx([0, 0.6, 0.3, 0.1], abs=0.01)
    assert torch.allclose(logprobs, logits.log_softmax(-1).gather(1, tokens[:, None]).squeeze(1))


def test_min_new_tokens_keeps_every_completion_going(backend):
    samples = backend.generate(PROMPTS, SamplingParams(group_size=2, max_new_tokens=6, min_new_tokens=6))
    assert samples.completion_ids.shape[1] == 6
    assert not torch.isin(samples.completion_ids, torch.tensor(backend.end_token_ids)).any()
    assert samples.completion_mask.all()


def test_a_policy_in_training_with_gradient_checkpointing_still_samples_with_its_cache(backend, tmp_path):
    directory = tmp_path / "policy"
    backend.model.save_pretrained(directory)
    backend.tokenizer.save_pretrained(directory)
    policy = load_policy(str(directory), gradient_checkpointing=True, device=torch.device("cpu"))
    assert policy.training
    checkpointed = HFGenerationBackend(policy, backend.tokenizer)
    samples = checkpointed.generate(PROMPTS, SamplingParams(group_size=2, max_new_tokens=6))
    assert policy.training
    recomputed, _ = completion_logprobs(policy, samples, temperature=1.0)
    assert torch.allclose(recomputed, samples.logprobs, atol=1e-4)


@pytest.mark.parametrize("fast", [True, False])
def test_a_policy_in_training_with_lora_dropout_samples_without_dropout(model_dir, fast):
    lora = LoraOptions(r=4, alpha=8, dropout=0.5, target_modules=("all-linear",))
    policy = load_policy(str(model_dir), lora=lora, device=torch.device("cpu"))
    make_matter(policy, "lora_B")
    assert policy.training
    torch.manual_seed(0)
    samples = HFGenerationBackend(policy, load_tokenizer(str(model_dir)), fast_decode=fast).generate(
        PROMPTS, SamplingParams(group_size=2, max_new_tokens=6)
    )
    assert policy.training
    policy.eval()
    with torch.no_grad():
        recomputed, _ = completion_logprobs(policy, samples, temperature=1.0)
    torch.testing.assert_close(recomputed, samples.logprobs, atol=1e-4, rtol=1e-4)


def test_a_policy_in_training_without_dropout_samples_in_train_mode(model_dir, monkeypatch):
    """The fast decoder skips the switch to eval mode (two walks over every module) when nothing it calls
    behaves differently in train mode."""
    policy = load_policy(str(model_dir), device=torch.device("cpu"))
    switched = []
    monkeypatch.setattr(policy, "eval", lambda: switched.append(True))
    HFGenerationBackend(policy, load_tokenizer(str(model_dir))).generate(PROMPTS, SamplingParams(group_size=2, max_new_tokens=4))
    assert policy.training and not switched

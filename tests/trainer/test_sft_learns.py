from trainer.builtin_datasets import arithmetic


def test_sft_on_level_one_arithmetic_reaches_held_out_exact_match(sft_run):
    _, sink = sft_run
    final = sink.metrics[max(sink.metrics)]
    first = sink.metrics[min(sink.metrics)]
    print(f"held-out exact match after SFT: {final['eval/accuracy']:.3f}")
    assert len(arithmetic.sft_rows(1, "test")) >= 10
    assert final["eval/accuracy"] >= 0.3
    assert final["loss"] < first["loss"] / 5
    for name in ("loss", "grad_norm", "lr", "throughput/tokens_per_s", "time/step_s", "eval/loss"):
        assert name in final


def test_sft_checkpoint_loads_back_through_from_pretrained(sft_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    checkpoint, _ = sft_run
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    assert model.config.vocab_size == len(tokenizer)

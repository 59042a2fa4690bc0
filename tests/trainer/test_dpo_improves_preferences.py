"""DPO from the SFT'd tiny model on arithmetic pairs (chosen correct, rejected wrong).

With plain DPO (rpo_alpha 0) the chosen log-probs sag and one or two of the 15 held-out sums flip to a
wrong answer; the RPO term (NLL on chosen, Pang et al. 2024) keeps them.
"""

from trainer.algorithms.dpo import train
from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink


def test_dpo_learns_the_preferences_without_losing_held_out_accuracy(sft_run, tmp_path):
    checkpoint, sft_sink = sft_run
    sft_accuracy = sft_sink.metrics[max(sft_sink.metrics)]["eval/accuracy"]
    config = config_from_dict(
        "dpo",
        {
            "model": checkpoint,
            "output_dir": str(tmp_path),
            "lr": 3e-5,
            "beta": 1.0,
            "rpo_alpha": 1.0,
            "max_steps": 60,
            "batch_size": 16,
            "max_length": 64,
            "max_prompt_length": 24,
            "eval_max_new_tokens": 24,
        },
    )
    sink = MemorySink()
    result = train(
        config,
        arithmetic.preference_rows(1, "train", pairs_per_problem=4),
        sink,
        eval_data=arithmetic.preference_rows(1, "test"),
    )
    late = [sink.metrics[step] for step in range(result.step - 9, result.step + 1)]
    late_accuracy = sum(m["rewards/accuracy"] for m in late) / len(late)
    late_margin = sum(m["rewards/margin"] for m in late) / len(late)
    first, last = sink.metrics[1], sink.metrics[result.step]
    print(f"DPO: rewards/accuracy (last 10 steps) {late_accuracy:.3f}, rewards/margin {first['rewards/margin']:.3f} -> "
          f"{late_margin:.3f}, held-out accuracy {sft_accuracy:.3f} -> {last['eval/accuracy']:.3f}")
    assert late_accuracy > 0.8
    assert late_margin > first["rewards/margin"] + 0.1
    assert last["eval/accuracy"] >= sft_accuracy
    assert last["logps/rejected"] < first["logps/rejected"]

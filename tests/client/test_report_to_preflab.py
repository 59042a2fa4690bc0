"""`TrainingArguments(report_to="preflab")` with transformers' Trainer and TRL 1.16's DPOTrainer and GRPOTrainer,
each trained 2-3 steps on the tiny model on the CPU: the run on the live server, its rows, and its summary. The run
stays open after train(), so that an evaluation after it lands in the run, and ends at callback.finish()."""

import os

import pytest
from preflab_client import PreflabCallback

from tests.client.helpers import stored_metrics
from trainer.builtin_datasets import arithmetic
from trainer.formats.answers import answers_match, extract_answer
from webapp.experiments.models import Run, Sample

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytestmark = pytest.mark.django_db(transaction=True)

COMMON = {"logging_steps": 1, "use_cpu": True, "bf16": False, "save_strategy": "no", "disable_tqdm": True, "seed": 0,
          "report_to": "preflab"}


@pytest.fixture
def preflab_env(live_server, api_token, tmp_path, monkeypatch):
    monkeypatch.setenv("PREFLAB_URL", live_server.url)
    monkeypatch.setenv("PREFLAB_TOKEN", api_token)
    monkeypatch.setenv("PREFLAB_OUTBOX_DIR", str(tmp_path / "outbox"))


def preflab_callback(trainer) -> PreflabCallback:
    [callback] = [item for item in trainer.callback_handler.callbacks if isinstance(item, PreflabCallback)]
    return callback


def logged_steps(trainer) -> dict[int, set[str]]:
    """The metric names transformers logged at each step, less the end of train()'s figures (a summary)."""
    from preflab_client import preflab_name

    steps: dict[int, set[str]] = {}
    for entry in trainer.state.log_history:
        if "train_runtime" not in entry:
            steps.setdefault(entry["step"], set()).update(preflab_name(name) for name in entry if name != "step")
    return steps


def lm_rows(tokenizer, count: int) -> list[dict]:
    rows = []
    for row in arithmetic.sft_rows(1, "train")[:count]:
        encoded = tokenizer(row["prompt"] + row["completion"], truncation=True, max_length=48, padding="max_length")
        rows.append({**encoded, "labels": [token if mask else -100 for token, mask in
                                           zip(encoded["input_ids"], encoded["attention_mask"], strict=True)]})
    return rows


def test_a_trainer_with_report_to_preflab_logs_and_its_evaluation_after_train_lands_in_the_run(
        preflab_env, tiny_model_dir, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), run_name="hf trainer", max_steps=3,
                             per_device_train_batch_size=4, per_device_eval_batch_size=4, learning_rate=1e-3, **COMMON)
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), args=args,
                      train_dataset=Dataset.from_list(lm_rows(tokenizer, 16)),
                      eval_dataset=Dataset.from_list(lm_rows(tokenizer, 8)))
    callback = preflab_callback(trainer)
    trainer.train()

    run = Run.objects.get(pk=callback.run.id)
    assert (run.status, run.name, run.total_steps) == (Run.Status.RUNNING, "hf trainer", 3)
    figures = trainer.evaluate()
    callback.finish()

    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    stored = stored_metrics(run.id)
    assert {step: set(metrics) for step, metrics in stored.items()} == logged_steps(trainer)
    assert {"loss", "lr", "grad_norm"} <= set(stored[1])
    # the end of train()'s figures are the summary, not one-point charts
    assert {"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss"} <= set(
        run.summary)
    assert not {"train_runtime", "total_flos", "train_loss"} & set(run.metric_names)
    assert run.summary["training/ended_at_step"] == 3
    # the evaluation after train(): charted at the last step and kept in the summary
    assert stored[3]["eval/loss"] == pytest.approx(figures["eval_loss"])
    assert run.summary["eval/loss"] == pytest.approx(figures["eval_loss"]) and run.summary["eval/step"] == 3


def test_a_trl_dpo_trainer_with_report_to_preflab(preflab_env, tiny_model_dir, tmp_path):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    rows = [{key: row[key] for key in ("prompt", "chosen", "rejected")}
            for row in arithmetic.preference_rows(1, "train", 8)]
    args = DPOConfig(output_dir=str(tmp_path / "dpo"), run_name="trl dpo", max_steps=2, per_device_train_batch_size=2,
                     max_length=96, learning_rate=1e-4, gradient_checkpointing=False, **COMMON)
    trainer = DPOTrainer(model=str(tiny_model_dir), args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=AutoTokenizer.from_pretrained(tiny_model_dir))
    trainer.train()
    callback = preflab_callback(trainer)
    callback.finish()

    run = Run.objects.get(pk=callback.run.id)
    assert (run.status, run.name, run.config["trainer"]) == (Run.Status.SUCCEEDED, "trl dpo", "DPOTrainer")
    stored = stored_metrics(run.id)
    assert {step: set(metrics) for step, metrics in stored.items()} == logged_steps(trainer)
    assert list(stored) == [1, 2]
    assert {"loss", "rewards/chosen", "rewards/rejected", "rewards/accuracy", "rewards/margin"} <= set(stored[1])
    assert "train_runtime" in run.summary


def exact_answer(prompts, completions, answer, **_) -> list[float]:
    return [float(answers_match(extract_answer(text), str(truth))) for text, truth in zip(completions, answer, strict=True)]


def test_a_trl_grpo_trainer_with_report_to_preflab(preflab_env, tiny_model_dir, tmp_path):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = [{"prompt": row["prompt"], "answer": row["answer"]} for row in arithmetic.sft_rows(1, "train")[:8]]
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), run_name="trl grpo", max_steps=2, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=8, learning_rate=1e-4, beta=0.04,
                      gradient_checkpointing=False, report_to=["preflab"],
                      **{key: value for key, value in COMMON.items() if key != "report_to"})
    trainer = GRPOTrainer(model=str(tiny_model_dir), args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), reward_funcs=exact_answer)
    trainer.train()
    callback = preflab_callback(trainer)
    callback.finish()

    run = Run.objects.get(pk=callback.run.id)
    assert (run.status, run.name, run.config["trainer"]) == (Run.Status.SUCCEEDED, "trl grpo", "GRPOTrainer")
    stored = stored_metrics(run.id)
    assert {step: set(metrics) for step, metrics in stored.items()} == logged_steps(trainer)
    assert list(stored) == [1, 2]
    assert {"loss", "reward/mean", "reward/exact_answer", "kl"} <= set(stored[1])
    assert Sample.objects.filter(run=run).values("step").distinct().count() == 2


def test_a_second_train_ends_the_first_run_as_succeeded_and_starts_another(preflab_env, tiny_model_dir, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), run_name="twice", max_steps=2,
                             per_device_train_batch_size=4, **COMMON)
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), args=args,
                      train_dataset=Dataset.from_list(lm_rows(tokenizer, 8)))
    callback = preflab_callback(trainer)
    trainer.train()
    first = callback.run.id
    trainer.train()
    second = callback.run.id
    callback.finish()

    assert first != second
    assert [Run.objects.get(pk=pk).status for pk in (first, second)] == [Run.Status.SUCCEEDED] * 2
    assert list(stored_metrics(first)) == list(stored_metrics(second)) == [1, 2]


CALLBACK_THEN_EXIT = """
import sys
from preflab_client import PreflabCallback
from transformers import TrainerControl, TrainerState, TrainingArguments

callback = PreflabCallback(name="ends at exit")
args, state, control = TrainingArguments("out", report_to="none"), TrainerState(max_steps=2), TrainerControl()
callback.on_train_begin(args, state, control)
for step in (1, 2):
    state.global_step = step
    callback.on_log(args, state, control, logs={"loss": 1.0 / step})
callback.on_train_end(args, state, control)
callback.on_log(args, state, control, logs={"eval_loss": 0.25})  # what trainer.evaluate() logs
if sys.argv[1] == "raise":
    raise RuntimeError("the final table broke")
"""


@pytest.mark.parametrize("ending", ["exit", "raise"])
def test_the_run_left_open_after_train_ends_with_the_program(preflab_env, tmp_path, ending):
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    (tmp_path / "script.py").write_text(CALLBACK_THEN_EXIT)
    completed = subprocess.run([sys.executable, "script.py", ending], cwd=tmp_path, capture_output=True, text=True,
                               timeout=120, env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "clients/python/src")})
    assert completed.returncode == (0 if ending == "exit" else 1), completed.stderr[-3000:]
    run = Run.objects.get(name="ends at exit")
    assert stored_metrics(run.pk) == {1: {"loss": 1.0}, 2: {"loss": 0.5, "eval/loss": 0.25}}
    assert (run.summary["eval/loss"], run.summary["training/ended_at_step"]) == (0.25, 2)
    if ending == "exit":
        assert (run.status, run.error) == (Run.Status.SUCCEEDED, "")
    else:
        assert run.status == Run.Status.FAILED
        assert run.error == "the program ended on RuntimeError: the final table broke (after training ended)"

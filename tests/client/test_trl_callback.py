"""The acceptance test of the callback: a real TRL GRPOTrainer on the tiny model, on the CPU, with
`callbacks=[PreflabCallback(url, token)]`, lands on Preflab as an external run whose rows are TRL's own log
history under Preflab's metric names, with TRL's completions as its samples."""

import math
import os

import preflab_client.runs
import pytest
from preflab_client import Client, PreflabCallback, preflab_name

from tests.client.helpers import stored_metrics
from trainer.builtin_datasets import arithmetic
from trainer.formats.answers import answers_match, extract_answer
from webapp.experiments.models import Run, Sample

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 3
PROMPTS_PER_STEP = 2
GROUP = 4


def exact_answer(prompts, completions, answer, **_) -> list[float]:
    return [float(answers_match(extract_answer(text), str(truth))) for text, truth in zip(completions, answer, strict=True)]


def same(stored: float, logged: float) -> bool:
    return (math.isnan(stored) and math.isnan(logged)) if isinstance(logged, float) and math.isnan(logged) else (
        stored == logged)


def test_a_trl_grpo_run_logs_to_preflab_through_the_callback(live_server, api_token, tiny_model_dir, tmp_path,
                                                            monkeypatch):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("PREFLAB_OUTBOX_DIR", str(tmp_path / "outbox"))
    rows = [{"prompt": row["prompt"], "answer": row["answer"]} for row in arithmetic.sft_rows(1, "train")[:16]]
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"), per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
        num_generations=GROUP, max_completion_length=8, max_steps=STEPS, learning_rate=1e-4, beta=0.04,
        logging_steps=1, gradient_checkpointing=False, use_cpu=True, bf16=False, report_to="none",
        save_strategy="no", disable_tqdm=True, seed=0,
    )
    callback = PreflabCallback(live_server.url, api_token, name="trl grpo", tags=["grpo", "tiny"], group="callbacks")
    trainer = GRPOTrainer(model=str(tiny_model_dir), args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), reward_funcs=exact_answer,
                          callbacks=[callback])
    trainer.train()
    assert Run.objects.get(pk=callback.run.id).status == Run.Status.RUNNING  # open for what follows train()
    callback.finish()

    run = Run.objects.get(pk=callback.run.id)
    assert (run.status, run.kind, run.name, run.total_steps) == (Run.Status.SUCCEEDED, "external", "trl grpo", STEPS)
    assert run.config["model"] == str(tiny_model_dir) and run.config["trainer"] == "GRPOTrainer"
    assert (run.tags, run.group) == (["grpo", "tiny"], "callbacks")
    assert run.config["learning_rate"] == 1e-4 and run.config["num_generations"] == GROUP

    # every value TRL logged (its own log_history), at its step, under Preflab's name; a null is no value; the
    # end of train()'s figures (train_runtime, ...) are the run's summary
    logged: dict[int, dict[str, float]] = {}
    for entry in trainer.state.log_history:
        if "train_runtime" in entry:
            assert run.summary["train_runtime"] == entry["train_runtime"]
            assert run.summary["train_loss"] == pytest.approx(entry["train_loss"])
            continue
        logged.setdefault(entry["step"], {}).update(
            {preflab_name(name): value for name, value in entry.items() if name != "step" and value is not None})
    stored = stored_metrics(run.id)
    assert list(stored) == list(range(1, STEPS + 1)) == list(logged)
    for step in stored:
        assert set(stored[step]) == set(logged[step]), step
        assert all(same(stored[step][name], logged[step][name]) for name in logged[step]), (stored[step], logged[step])
    names = set(stored[1])
    assert {"loss", "reward/mean", "reward/std", "reward/exact_answer", "completion/mean_length",
            "completion/clipped_ratio", "lr", "kl", "entropy", "grad_norm"} <= names
    assert not names & {"reward", "reward_std", "learning_rate", "rewards/exact_answer/mean"}

    # TRL's completions of each step, as samples at that step; the last step's are what TRL still holds
    samples = list(Sample.objects.filter(run=run).order_by("step", "id"))
    assert [sample.step for sample in samples] == [step for step in range(1, STEPS + 1)
                                                   for _ in range(PROMPTS_PER_STEP * GROUP)]
    last = [sample for sample in samples if sample.step == STEPS]
    held = trainer._logs
    assert [(sample.prompt, sample.completion) for sample in last] == list(zip(held["prompt"], held["completion"],
                                                                                strict=True))
    assert [sample.advantage for sample in last] == pytest.approx(list(held["advantages"]))
    assert [sample.rewards["exact_answer"] for sample in last] == list(held["rewards"]["exact_answer"])


def test_cancel_on_preflab_stops_the_trl_training_and_the_run_is_canceled(live_server, api_token, tiny_model_dir,
                                                                        tmp_path, monkeypatch):
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    # the run reads cancel_requested with its heartbeat: every half second here rather than every 10 s
    monkeypatch.setattr(preflab_client.runs, "HEARTBEAT_SECONDS", 0.5)
    monkeypatch.setenv("PREFLAB_OUTBOX_DIR", str(tmp_path / "outbox"))
    callback = PreflabCallback(live_server.url, api_token)

    class PressCancelAtStep2(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:  # as a person would on the run's page, through the API
                with Client(live_server.url, api_token) as person:
                    person.cancel_run(callback.run.id)

    rows = [{"prompt": row["prompt"], "answer": row["answer"]} for row in arithmetic.sft_rows(1, "train")[:64]]
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"), per_device_train_batch_size=4, num_generations=2, max_completion_length=4,
        max_steps=60, logging_steps=1, gradient_checkpointing=False, use_cpu=True, bf16=False, report_to="none",
        save_strategy="no", disable_tqdm=True, seed=0,
    )
    trainer = GRPOTrainer(model=str(tiny_model_dir), args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), reward_funcs=exact_answer,
                          callbacks=[callback, PressCancelAtStep2()])
    trainer.train()

    run = Run.objects.get(pk=callback.run.id)
    assert run.status == Run.Status.CANCELED and run.cancel_requested
    assert 2 <= trainer.state.global_step < 60
    assert list(stored_metrics(run.pk)) == list(range(1, trainer.state.global_step + 1))


def test_an_exception_in_training_fails_the_run_with_its_text(live_server, api_token, tiny_model_dir, tmp_path,
                                                            monkeypatch):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("PREFLAB_OUTBOX_DIR", str(tmp_path / "outbox"))
    calls = []

    def reward_that_breaks(prompts, completions, **_) -> list[float]:
        calls.append(len(completions))
        if len(calls) == 2:
            raise RuntimeError("the reward server went away")
        return [0.0] * len(completions)

    rows = [{"prompt": row["prompt"]} for row in arithmetic.sft_rows(1, "train")[:16]]
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"), per_device_train_batch_size=4, num_generations=2, max_completion_length=4,
        max_steps=5, logging_steps=1, gradient_checkpointing=False, use_cpu=True, bf16=False, report_to="none",
        save_strategy="no", disable_tqdm=True, seed=0,
    )
    callback = PreflabCallback(live_server.url, api_token)
    trainer = GRPOTrainer(model=str(tiny_model_dir), args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                          reward_funcs=reward_that_breaks, callbacks=[callback])
    with pytest.raises(RuntimeError, match="the reward server went away"):
        trainer.train()

    run = Run.objects.get(pk=callback.run.id)
    assert run.status == Run.Status.FAILED
    assert run.error == "RuntimeError: the reward server went away"
    assert list(stored_metrics(run.pk)) == [1]  # the step before the failure was sent first

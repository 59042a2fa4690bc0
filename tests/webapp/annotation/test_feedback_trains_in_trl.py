"""Issue 31's acceptance: the exported unpaired JSONL trains in TRL 1.16's KTOTrainer and a ratings project's
exported pairs (with their margins) in its RewardTrainer, on the tiny local model, a couple of CPU steps each."""

from __future__ import annotations

import math

import pytest

from tests.webapp.annotation.feedback_fixtures import make_ratings_project, make_thumbs_project

pytestmark = pytest.mark.django_db

TRAINING = {"max_steps": 2, "per_device_train_batch_size": 2, "max_length": 48, "learning_rate": 1e-4,
            "logging_steps": 1, "use_cpu": True, "bf16": False, "save_strategy": "no", "disable_tqdm": True,
            "report_to": [], "seed": 0, "gradient_checkpointing": False}


def _exported(researcher_client, url: str, path, **params):
    response = researcher_client.get(url, params)
    assert response.status_code == 200
    path.write_bytes(b"".join(response.streaming_content))
    from datasets import load_dataset

    return load_dataset("json", data_files=str(path), split="train", cache_dir=str(path.parent / "datasets-cache"))


def _losses(trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_the_exported_unpaired_rows_train_in_trls_kto_trainer(researcher, researcher_client, tiny_model_dir,
                                                               tmp_path):
    from transformers import AutoTokenizer
    from trl import KTOConfig, KTOTrainer

    project = make_thumbs_project(owner=researcher)
    dataset = _exported(researcher_client, f"/projects/{project.pk}/export/unpaired.jsonl/",
                        tmp_path / "unpaired.jsonl")
    assert len(dataset) == 6 and set(dataset["label"]) == {True, False}
    args = KTOConfig(output_dir=str(tmp_path / "kto"), **TRAINING)
    trainer = KTOTrainer(model=str(tiny_model_dir), args=args, train_dataset=dataset,
                         processing_class=AutoTokenizer.from_pretrained(tiny_model_dir))
    trainer.train()
    losses = _losses(trainer)
    assert trainer.state.global_step == 2 and len(losses) == 2 and all(math.isfinite(loss) for loss in losses)


def test_the_exported_ratings_pairs_train_in_trls_reward_trainer_with_their_margins(researcher, researcher_client,
                                                                                     tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    project = make_ratings_project(owner=researcher)
    dataset = _exported(researcher_client, f"/projects/{project.pk}/export/pairs.jsonl/", tmp_path / "pairs.jsonl",
                        binarization="worst")
    assert dataset["margin"] == [3.25, 2.0]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RewardConfig(output_dir=str(tmp_path / "rm"), **TRAINING)
    trainer = RewardTrainer(model=str(tiny_model_dir), args=args, train_dataset=dataset, processing_class=tokenizer)
    assert "margin" in trainer.train_dataset.column_names  # the margin loss reads it (RewardTrainer.compute_loss)
    trainer.train()
    losses = _losses(trainer)
    assert trainer.state.global_step == 2 and len(losses) == 2 and all(math.isfinite(loss) for loss in losses)

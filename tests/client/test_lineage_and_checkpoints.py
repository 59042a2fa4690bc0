"""A run's lineage and its checkpoints through the client: data source → run → checkpoint → the annotation round
sampled from it, built through the real services; a checkpoint downloaded as a streamed tar unpacks into a
directory transformers loads, the same weights; a checkpoint the user does not reach is a 404."""

import hashlib
import shutil
from pathlib import Path

import pytest
from preflab_client import ApiError

from tests.webapp.experiments.helpers import ARITHMETIC, register_tiny_model, small_config, tiny_model_roots
from webapp.accounts.services import user_create
from webapp.annotation import services as annotation_services
from webapp.annotation.importing import ImportRecord
from webapp.experiments import services
from webapp.experiments.data_snapshot import snapshot_path
from webapp.experiments.models import ModelRef

pytestmark = pytest.mark.django_db(transaction=True)

SAMPLING = {"responses_per_prompt": 2, "max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0, "seed": 0}


def pairs_project(owner):
    project = annotation_services.project_create(name="Pairs", owner=owner)
    annotation_services.prompts_import(project=project, records=[
        ImportRecord(line=index + 1, external_id=f"p{index}", text=f"{index} + 1 =", chosen=str(index + 1),
                     rejected="7") for index in range(4)])
    return project


def checkpoint_of(run, tiny_model_dir: Path, step: int) -> ModelRef:
    """A checkpoint directory as the trainer writes one (the model saved with save_pretrained), registered as the
    run's sink registers it."""
    directory = Path(run.config["output_dir"]) / "checkpoints" / f"step-{step}"
    shutil.copytree(tiny_model_dir, directory)
    return services.model_register_checkpoint(run_id=run.pk, step=step, path=str(directory))


@pytest.fixture
def tiny(settings, tiny_model_dir):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    return register_tiny_model(tiny_model_dir)


def test_a_runs_lineage_from_its_data_to_the_rounds_sampled_from_its_checkpoints(preflab, researcher, tiny,
                                                                                 tiny_model_dir):
    project = pairs_project(researcher)
    run = services.run_create(kind="dpo", config=small_config(tiny), created_by=researcher, name="dpo on pairs",
                              data_source={"type": "project_pairs", "project_id": project.pk, "aggregation": "majority"})
    first, second = checkpoint_of(run, tiny_model_dir, 2), checkpoint_of(run, tiny_model_dir, 4)
    to_rank = annotation_services.project_create(name="To rank", owner=researcher)
    annotation_services.prompts_import(project=to_rank, records=[
        ImportRecord(line=1, external_id="q", text="2 + 2 =")])
    job = annotation_services.sampling_job_create(project=to_rank, model_path=second.path,
                                                  generation_settings=SAMPLING, created_by=researcher)

    lineage = preflab.lineage(run.pk)
    assert lineage["run"] == {"id": run.pk, "name": "dpo on pairs", "kind": "dpo", "status": "queued"}
    assert lineage["data"]["type"] == "project_pairs" and lineage["data"]["aggregation"] == "majority"
    assert lineage["data"]["project"] == {"id": project.pk, "name": "Pairs"}
    frozen = snapshot_path(run.pk).read_bytes()
    assert lineage["data"]["rows"] == 4 == len(frozen.splitlines())
    assert lineage["data"]["sha256"] == hashlib.sha256(frozen).hexdigest()
    assert [(checkpoint["id"], checkpoint["step"]) for checkpoint in lineage["checkpoints"]] == [
        (first.pk, 2), (second.pk, 4)]
    assert [(round_["project"]["id"], round_["round"], round_["checkpoint_id"], round_["step"],
             round_["sampling_status"]) for round_ in lineage["rounds"]] == [
        (to_rank.pk, job.round.number, second.pk, 4, "queued")]
    assert lineage["rounds"][0]["project"]["name"] == "To rank"

    forked = services.run_fork(parent_id=run.pk, created_by=researcher, name="a fork", config={})
    assert preflab.lineage(forked.pk)["parent_id"] == run.pk
    with pytest.raises(ApiError) as refused:
        preflab.lineage(999_999)
    assert refused.value.status == 404


def test_a_downloaded_checkpoint_loads_with_transformers(preflab, researcher, tiny, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    run = services.run_create(kind="sft", config=small_config(tiny), data_source=ARITHMETIC, created_by=researcher)
    checkpoint = checkpoint_of(run, tiny_model_dir, 6)
    (Path(checkpoint.path) / "nested").mkdir()
    (Path(checkpoint.path) / "nested" / "note.txt").write_text("kept")

    dest = preflab.download_checkpoint(checkpoint.pk, tmp_path / "downloaded")
    for original in Path(checkpoint.path).rglob("*"):
        if original.is_file():
            copy = dest / original.relative_to(checkpoint.path)
            assert copy.read_bytes() == original.read_bytes(), copy
    loaded = AutoModelForCausalLM.from_pretrained(dest)
    reference = AutoModelForCausalLM.from_pretrained(checkpoint.path)
    assert all((a == b).all() for a, b in zip(loaded.state_dict().values(), reference.state_dict().values(),
                                              strict=True))
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".preflab-download-")]

    with pytest.raises(FileExistsError):
        preflab.download_checkpoint(checkpoint.pk, dest)
    other, _ = user_create(username="otto", role="researcher")
    not_mine = services.run_create(kind="sft", config=small_config(tiny), data_source=ARITHMETIC, created_by=other)
    for checkpoint_id in (checkpoint_of(not_mine, tiny_model_dir, 2).pk, tiny.pk, 999_999):
        with pytest.raises(ApiError) as refused:
            preflab.download_checkpoint(checkpoint_id, tmp_path / f"refused-{checkpoint_id}")
        assert refused.value.status == 404
        assert refused.value.detail == f"there is no checkpoint {checkpoint_id}"
        assert not (tmp_path / f"refused-{checkpoint_id}").exists()

"""An online run's rewards are checked against its data at launch: a reward reading a row field the data lacks
(answer_match on prompts without a reference answer) is refused before anything is queued, naming the reward, the
field and how many rows lack it (issue 29)."""

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.experiments.helpers import as_the_browser_posts
from webapp.annotation import services as annotation_services
from webapp.annotation.importing import ImportRecord
from webapp.experiments import services
from webapp.experiments.forms import LaunchForm
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_queue(monkeypatch):
    monkeypatch.setattr("webapp.queueing.publish", lambda task, **message: "")


def _project(owner, answers: list[str | None], name: str = "Prompts"):
    project = annotation_services.project_create(name=name, owner=owner)
    annotation_services.prompts_import(project=project, records=[
        ImportRecord(line=index + 1, external_id=f"p{index}", text=f"What is {index} + 1?", reference_answer=answer)
        for index, answer in enumerate(answers)
    ])
    return project


def _grpo_config(model, **overrides) -> dict:
    return {"model": model.path, "batch_size": 2, "group_size": 2, "max_length": 64, "max_new_tokens": 16,
            "max_steps": 2, **overrides}


def test_answer_match_on_prompts_without_answers_is_refused_naming_reward_field_and_count(
    researcher, tiny_model
):
    project = _project(researcher, [None] * 4)
    source = {"type": "project_prompts", "project_id": project.pk}
    with pytest.raises(ValidationError) as error:
        services.run_create(kind="grpo", config=_grpo_config(tiny_model, rewards={"answer_match": 1.0}),
                            data_source=source, created_by=researcher)
    (message,) = error.value.message_dict["rewards.answer_match"]
    assert message.startswith(f"reward answer_match needs each prompt's `answer`; project {project.pk}'s prompts "
                              "have none (0 of 4 have one)")
    assert not Run.objects.exists()


def test_the_default_rewards_of_ppo_and_the_dapo_preset_are_refused_too(researcher, tiny_model):
    project = _project(researcher, ["1", None, "3"])  # one prompt lacking its answer is enough to fail a step
    source = {"type": "project_prompts", "project_id": project.pk}
    ppo = {key: value for key, value in _grpo_config(tiny_model).items() if key != "group_size"}
    for kind, config in (("ppo", ppo),  # no rewards given: the kind's default answer_match
                         ("grpo", _grpo_config(tiny_model, rewards={"answer_match": 1.0, "soft_overlong": 1.0},
                                               dynamic_sampling=True))):
        with pytest.raises(ValidationError, match=r"lack it in 1 \(2 of 3 have one\)"):
            services.run_create(kind=kind, config=config, data_source=source, created_by=researcher)
    with pytest.raises(ValidationError, match="reward answer_match needs"):
        services.run_launch(kind="grpo", config=_grpo_config(tiny_model), data_source=source, created_by=researcher)
    assert not Run.objects.exists()


def test_rewards_the_data_can_feed_are_accepted(researcher, tiny_model):
    answered = _project(researcher, ["1", "2"])
    run = services.run_create(kind="grpo", config=_grpo_config(tiny_model),
                              data_source={"type": "project_prompts", "project_id": answered.pk}, created_by=researcher)
    assert run.config["rewards"] == {"answer_match": 1.0}
    unanswered = _project(researcher, [None, None], name="Unanswered")
    services.run_create(kind="grpo", config=_grpo_config(tiny_model, rewards={"format_tags": 1.0}),
                        data_source={"type": "project_prompts", "project_id": unanswered.pk}, created_by=researcher)
    assert Run.objects.count() == 2


def test_an_uploaded_file_without_answers_is_refused_for_answer_match(researcher, tiny_model, settings):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("prompts.jsonl", b'{"prompt": "1 + 1 =", "answer": "2"}\n{"prompt": "2 + 2 ="}\n')
    with pytest.raises(ValidationError, match=r"the rows of prompts.jsonl lack it in 1 \(1 of 2 have one\)"):
        services.run_create_from_upload(file=upload, kind="grpo", config=_grpo_config(tiny_model),
                                        created_by=researcher)
    assert not Run.objects.exists()


def test_the_form_shows_the_refusal_on_the_reward_field(researcher_client, researcher, tiny_model):
    project = _project(researcher, [None] * 12)
    form = LaunchForm(kind="grpo", user=researcher)
    posted = {**as_the_browser_posts(form), "model": tiny_model.path, "data_source": "project_prompts",
              "project": str(project.pk), "batch_size": "2", "group_size": "2"}
    assert posted["reward__answer_match"] == "1.0"  # the form's default reward
    response = researcher_client.post("/runs/new?kind=grpo", posted)
    assert response.status_code == 422
    errors = response.context["form"].errors
    assert errors["reward__answer_match"] == [
        f"reward answer_match needs each prompt's `answer`; project {project.pk}'s prompts have none (0 of 12 have "
        "one): give every row its answer, or leave answer_match out"]
    assert 'href="#id_reward__answer_match"' in response.content.decode()
    assert not Run.objects.exists()


def test_the_api_launch_answers_422_naming_the_reward(researcher, tiny_model):
    from tests.webapp.api.run_api_helpers import api_client_of

    project = _project(researcher, [None] * 3)
    response = api_client_of(researcher).post("/runs", {
        "kind": "grpo", "name": "from a program", "config": _grpo_config(tiny_model),
        "data_source": {"type": "project_prompts", "project_id": project.pk}})
    assert response.status_code == 422, response.content
    assert response.json()["detail"].startswith(
        f"config.rewards.answer_match: reward answer_match needs each prompt's `answer`; project {project.pk}'s "
        "prompts have none (0 of 3 have one)")
    assert not Run.objects.exists()

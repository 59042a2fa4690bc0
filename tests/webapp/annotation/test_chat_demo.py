"""`make run`'s chat demo: SmolLM2 registered, a chat project of system + user conversations, one sampling job."""

import io

import pytest

from webapp.accounts.services import user_create
from webapp.annotation.demo import (
    CHAT_PROJECT_NAME,
    CHAT_QUESTIONS,
    CHAT_SAMPLING,
    DEMO_ASPECTS,
    seed_demo_data,
)
from webapp.annotation.models import Project, SamplingJob
from webapp.experiments.demo import CHAT_MODEL_DIRECTORY, CHAT_MODEL_NAME
from webapp.experiments.models import ModelRef

pytestmark = pytest.mark.django_db


def test_the_demo_gets_a_chat_project_with_one_sampling_job_from_smollm2(settings, tmp_path, smollm2_dir):
    # the demo finds its built model under the first root (a link to the session's build: no second build)
    (tmp_path / CHAT_MODEL_DIRECTORY).symlink_to(smollm2_dir, target_is_directory=True)
    settings.MODEL_ROOTS = [tmp_path, smollm2_dir.parent]
    researcher, _ = user_create(username="researcher", role="researcher")
    user_create(username="annotator", role="annotator")
    output = io.StringIO()
    seed_demo_data(output)
    seed_demo_data(output)  # idempotent: one project, its prompts once, one job

    model = ModelRef.objects.get(name=CHAT_MODEL_NAME)
    assert model.architecture == ModelRef.Architecture.CAUSAL_LM and model.path == str(smollm2_dir)
    project = Project.objects.get(name=CHAT_PROJECT_NAME)
    prompts = list(project.prompts.order_by("id"))
    assert [prompt.messages[-1]["content"] for prompt in prompts] == list(CHAT_QUESTIONS)
    assert {tuple(message["role"] for message in prompt.messages) for prompt in prompts} == {("system", "user")}
    job = SamplingJob.objects.get(project=project)
    assert (job.status, job.model_path, job.created_by) == (SamplingJob.Status.QUEUED, model.path, researcher)
    assert job.generation_settings == CHAT_SAMPLING and CHAT_SAMPLING["responses_per_prompt"] == 2
    assert f"demo sampling job #{job.pk} exists" in output.getvalue()


def test_the_demo_has_a_project_of_each_mode_with_the_ratings_aspects(settings, tmp_path, smollm2_dir):
    (tmp_path / CHAT_MODEL_DIRECTORY).symlink_to(smollm2_dir, target_is_directory=True)
    settings.MODEL_ROOTS = [tmp_path, smollm2_dir.parent]
    user_create(username="researcher", role="researcher")
    seed_demo_data(io.StringIO())

    modes = {project.mode for project in Project.objects.all()}
    assert modes == {"ranking", "pairwise", "thumbs", "ratings"}
    ratings = Project.objects.get(mode="ratings")
    assert [aspect["name"] for aspect in ratings.aspects] == [aspect["name"] for aspect in DEMO_ASPECTS]
    assert (ratings.rating_min, ratings.rating_max) == (1, 5)
    for project in Project.objects.filter(mode__in=("thumbs", "ratings")):
        assert project.prompts.count() == 10
        assert all(2 <= prompt.response_count <= project.responses_per_item for prompt in project.prompts.all())

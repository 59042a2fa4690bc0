"""The migration to rounds (annotation 0006) makes one round of each earlier sampling job that stored responses, in
the order they were made, and one API round per project of the responses added through the API; imported
responses belong to no round."""

import pytest

from tests.webapp.migrating import latest_migrations_after, migrate_to  # noqa: F401 (the fixture)

BEFORE = [("annotation", "0005_project_owner")]
AFTER = [("annotation", "0006_rounds")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("latest_migrations_after")
def test_earlier_sampling_jobs_and_api_responses_become_rounds():
    old = migrate_to(BEFORE)
    project_model, prompt_model = old.get_model("annotation", "Project"), old.get_model("annotation", "Prompt")
    response_model, job_model = old.get_model("annotation", "Response"), old.get_model("annotation", "SamplingJob")
    project = project_model.objects.create(name="old")
    prompts = [prompt_model.objects.create(project=project, external_id=f"p{i}", text="Q?") for i in range(2)]
    first, empty, second = (job_model.objects.create(project=project, model_path=f"/models/m{i}",
                                                     generation_settings={"responses_per_prompt": 2})
                            for i in range(3))
    response_model.objects.create(prompt=prompts[0], text="imported", source="imported")
    for job, prompt in ((first, prompts[0]), (second, prompts[1])):
        response_model.objects.create(prompt=prompt, text=f"from job {job.pk}", source="model",
                                      source_detail={"model": job.model_path, "sampling_job": job.pk})
    response_model.objects.create(prompt=prompts[1], text="by api", source="api")

    migrate_to(AFTER)
    from webapp.annotation.models import Prompt, Response, Round, SamplingJob

    rounds = list(Round.objects.filter(project_id=project.pk).values_list("number", "source", "model",
                                                                             "responses_per_prompt"))
    assert rounds == [(1, "sampled", "/models/m0", 2), (2, "sampled", "/models/m2", 2), (3, "api", "", 0)]
    by_text = {response.text: response.round for response in Response.objects.select_related("round")}
    assert by_text["imported"] is None and by_text["by api"].number == 3
    assert by_text[f"from job {first.pk}"].number == 1 and by_text[f"from job {second.pk}"].number == 2
    assert SamplingJob.objects.get(pk=first.pk).round.number == 1 and SamplingJob.objects.get(pk=empty.pk).round is None
    assert [prompt.round.number for prompt in Prompt.objects.order_by("external_id")] == [1, 2]

"""Bad values in addresses and forms get a refusal that names the parameter (never a 500) and write nothing."""

import pytest
from django.urls import reverse

from tests.webapp.annotation.factories import make_project
from webapp.annotation import services as annotation_services
from webapp.annotation.models import Project, Ranking
from webapp.experiments.models import ModelRef

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("/runs/new?fork=abc", "fork"),
        ("/runs/new?fork=%3Cscript%3E", "fork"),
        ("/runs/?status=%00", "status"),
        ("/runs/?query=%00", "query"),
        ("/runs/rows?query=a%00b", "query"),
        ("/models/?q%00=1", "q"),
    ],
)
def test_a_bad_query_parameter_gets_a_400_naming_it(researcher_client, url, named):
    response = researcher_client.get(url)
    assert response.status_code == 400, (url, response.status_code)
    assert named in response.content.decode()
    # what the user typed comes back as plain text, never as markup
    assert response["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"path": "/models/tiny\x00", "name": ""}, "path contains a NUL character"),
        ({"path": "org/model", "name": "n\x00ame"}, "name contains a NUL character"),
        ({"path": "org/model", "name": "x" * 201}, "name is 201 characters long; at most 200"),
    ],
)
def test_a_model_name_or_path_that_cannot_be_stored_is_refused_naming_the_field(researcher_client, fields, named):
    response = researcher_client.post(reverse("experiments:models"), fields)
    assert response.status_code == 200
    assert named in response.content.decode()
    assert not ModelRef.objects.exists()


@pytest.mark.parametrize(
    "fields",
    [{"choice": "a"}, {"choice": "a", "response_a": "x", "response_b": "1"}, {"choice": "a", "response_b": "1"}],
    ids=["both missing", "not a number", "response_a missing"],
)
def test_a_pairwise_submit_without_its_response_numbers_is_refused_naming_the_field(annotator_client, annotator, fields):
    project = make_project(items=1, responses=2, members=[annotator], mode=Project.Mode.PAIRWISE)
    assignment = annotation_services.assignment_lease_next(project=project, annotator=annotator)
    response = annotator_client.post(reverse("annotation:annotate_submit", args=[assignment.pk]), fields,
                                     HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert "response_a: a response number is expected" in response.content.decode()
    assert not Ranking.objects.exists()


def test_a_rationale_over_the_cap_is_refused_naming_it_and_the_page_caps_the_box(annotator_client, annotator):
    project = make_project(items=1, responses=2, members=[annotator], mode=Project.Mode.PAIRWISE)
    page = annotator_client.get(reverse("annotation:annotate", args=[project.pk])).content.decode()
    assert f'maxlength="{annotation_services.RATIONALE_MAX_CHARS}"' in page
    assignment = annotation_services.assignment_lease_next(project=project, annotator=annotator)
    responses = list(assignment.prompt.responses.order_by("pk").values_list("pk", flat=True))
    fields = {"choice": "a", "response_a": str(responses[0]), "response_b": str(responses[1]),
              "rationale": "x" * (annotation_services.RATIONALE_MAX_CHARS + 1)}
    url = reverse("annotation:annotate_submit", args=[assignment.pk])
    response = annotator_client.post(url, fields, HTTP_HX_REQUEST="true")
    assert "rationale: 10,001 characters; at most 10,000 are kept" in response.content.decode()
    assert not Ranking.objects.exists()
    fields["rationale"] = "x" * annotation_services.RATIONALE_MAX_CHARS
    annotator_client.post(url, fields, HTTP_HX_REQUEST="true")
    assert len(Ranking.objects.get().rationale) == annotation_services.RATIONALE_MAX_CHARS

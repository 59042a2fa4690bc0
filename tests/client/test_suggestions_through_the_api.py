"""An accepted machine suggestion through the client: thumbs that are the suggestion unchanged record it on each
label, as the annotation page's M does."""

import pytest

from tests.webapp.annotation.factories import make_project
from webapp.annotation.models import Project, Prompt, ResponseLabel, Suggestion

pytestmark = pytest.mark.django_db(transaction=True)


def test_thumbs_accepting_a_suggestion_record_it(preflab, researcher):
    project = make_project(items=1, responses=2, owner=researcher, mode=Project.Mode.THUMBS)
    prompt = Prompt.objects.get(project=project)
    first, second = prompt.responses.order_by("id")
    rows = {response.pk: Suggestion.objects.create(project=project, prompt=prompt, response=response,
                                                   question="thumb", value=value, score=0.8, agent="judge X")
            for response, value in ((first, 1), (second, 0))}
    answer = preflab.submit_labels(prompt.pk, {first.pk: 1, second.pk: 0}, suggestion=rows[first.pk].pk)
    assert answer["changed"] is True
    assert dict(ResponseLabel.objects.values_list("response_id", "suggestion_id")) == {
        response: row.pk for response, row in rows.items()}

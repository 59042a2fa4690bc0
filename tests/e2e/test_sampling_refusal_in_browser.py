"""Issue 27 in the browser: a sampling form the server refuses (a 422) is swapped in by htmx with the error on its
field, and nothing is queued. The browser's own checks are lifted (a program posting the form skips them), so that
the refusal the test sees is the server's."""

import pytest

from tests.e2e.conftest import log_in
from tests.webapp.experiments.helpers import register_tiny_model, tiny_model_roots
from webapp.annotation import services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import SamplingJob

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_seed_of_2_to_the_70_comes_back_on_its_field_and_nothing_is_queued(
    page, live_server, researcher, settings, tiny_model_dir
):
    settings.MODEL_ROOTS = tiny_model_roots(tiny_model_dir)
    model = register_tiny_model(tiny_model_dir)
    project = services.project_create(name="Refused seed", responses_per_item=2, owner=researcher)
    services.prompts_import(project=project, records=[ImportRecord(line=1, external_id="p1", text="Calculate 1 + 3\n")])

    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    form = page.locator("#sampling form")
    form.evaluate("form => { form.noValidate = true; }")
    page.fill("input[name=model_path]", model.path)
    page.fill("input[name=seed]", str(2**70))
    with page.expect_response(lambda response: "/sample/" in response.url) as answer:
        form.locator("button[type=submit]").click()
    assert answer.value.status == 422
    error = page.locator("#id_seed_error")
    error.wait_for()
    assert "less than or equal to 9223372036854775807" in error.inner_text()
    assert page.locator("input[name=seed]").input_value() == str(2**70)  # the form came back as it was sent
    assert not SamplingJob.objects.exists()
    assert page.js_errors == []

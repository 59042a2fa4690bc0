"""Errors that help, through the client against the live server: a 401 says what is wrong with the token and where
to make one; a wrong address is the API's JSON 404 and no page's HTML ever reaches an ApiError; create_run and
add_responses send what the server's schema takes."""

import pytest
from preflab_client import ApiError, Client

from webapp.accounts.services import api_token_create, api_token_revoke
from webapp.annotation.models import Response
from webapp.experiments.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def refusal_of(client: Client, path: str) -> ApiError:
    with pytest.raises(ApiError) as refused:
        client.get(path)
    return refused.value


def test_a_401_says_whether_the_token_is_unknown_or_revoked_and_where_to_make_one(live_server, researcher):
    tokens_page = f"make a personal token on {live_server.url}/accounts/tokens/"
    with Client(live_server.url, "pfl_" + "x" * 40) as unknown:
        error = refusal_of(unknown, "projects")
    assert error.status == 401
    assert error.detail == f"the token is unknown to this server (mistyped, or made on another server); {tokens_page}"

    token, raw = api_token_create(user=researcher, name="laptop")
    with Client(live_server.url, raw) as client:
        assert list(client.projects()) == []
        token = api_token_revoke(token_id=token.pk, user=researcher)
        error = refusal_of(client, "projects")
    assert error.status == 401
    assert error.detail == (f"the token laptop (pfl_{token.prefix}…) was revoked on "
                            f"{token.revoked_at:%Y-%m-%d %H:%M} UTC; {tokens_page}")


def test_a_wrong_path_is_the_apis_json_404_and_no_html_reaches_the_error(preflab, live_server):
    error = refusal_of(preflab, "no/such/thing")
    assert error.status == 404
    assert error.detail == "/api/v1/no/such/thing: there is no such address in the API"

    # a base URL that is not Preflab's root: the pages answer (a login page, a 404 page), not the API
    for base in (f"{live_server.url}/somewhere/else", f"{live_server.url}/static"):
        with Client(base, preflab._token) as wrong:
            error = refusal_of(wrong, "projects")
        assert "<" not in str(error) and "html" not in error.detail.replace("text/html", ""), str(error)
        assert "text/html, not the Preflab API's JSON" in error.detail, str(error)
        assert "is the client's URL not the Preflab server's address?" in error.detail


def test_create_run_takes_no_data_source_where_the_schema_takes_none(preflab, researcher):
    project = preflab.create_project("for an external run")
    run = preflab.create_run("external", "logged elsewhere", {"lr": 0.1})
    assert Run.objects.get(pk=run["id"]).kind == "external"
    with_project = preflab.create_run("external", "with its project", {}, {"project_id": project["id"]})
    assert Run.objects.get(pk=with_project["id"]).data_source["project_id"] == project["id"]

    with pytest.raises(ApiError) as refused:
        preflab.create_run("dpo", "no data", {})
    assert refused.value.status == 422 and refused.value.detail.startswith("data_source: give the data to train on")
    assert not Run.objects.filter(name="no data").exists()


def test_add_responses_sends_what_the_schema_takes(preflab):
    project = preflab.create_project("responses")
    preflab.import_records(project["id"], [{"id": "a", "prompt": "2+2?"}])
    prompt = next(preflab.prompts(project["id"]))

    added = preflab.add_responses(prompt["id"], ["4", "5"], source="model", detail={"temperature": 0.7},
                                  model="tiny-gpt")
    assert [response["text"] for response in added] == ["4", "5"] and added[0]["round"] == 1
    stored = Response.objects.filter(pk__in=[response["id"] for response in added])
    assert {(response.source, response.round.model) for response in stored} == {("model", "tiny-gpt")}
    listed = next(preflab.prompts(project["id"]))["responses"]
    assert {(response["text"], response["model"], response["source"]) for response in listed} == {
        ("4", "tiny-gpt", "model"), ("5", "tiny-gpt", "model")}

    with pytest.raises(ApiError) as refused:
        preflab.add_responses(prompt["id"], ["6"], source="a guess")
    assert refused.value.status == 422 and "source" in refused.value.detail

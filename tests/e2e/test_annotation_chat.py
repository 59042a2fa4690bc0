"""A chat project in the browser: conversations imported as TRL conversational rows, responses sampled from the
real instruct model (SmolLM2-135M-Instruct) on a real Celery worker, then an annotator sees each conversation as
turns with their roles, no special token anywhere, and ranks it into the right Ranking row."""

import json
import time

import pytest

from tests.e2e.annotating import open_annotation, wait_ranked
from webapp.annotation import services
from webapp.annotation.importing import parse_import
from webapp.annotation.models import Prompt, Ranking, Response, SamplingJob

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SPECIAL_TOKENS = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "</s>", "<s>", "<|eot_id|>")
CONVERSATIONS = [
    [{"role": "system", "content": "You are a geography teacher."},
     {"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Name one primary colour."}],
]
SAMPLING = {"responses_per_prompt": 2, "max_new_tokens": 24, "temperature": 1.0, "top_p": 1.0, "seed": 0}


def _sampled_chat_project(annotator, researcher, smollm2_dir):
    project = services.project_create(name="Chat in the browser", responses_per_item=2, members=[annotator])
    rows = "\n".join(json.dumps({"id": f"c{index}", "prompt": messages}) for index, messages in enumerate(CONVERSATIONS))
    services.prompts_import(project=project, records=parse_import(rows.encode(), file_format="jsonl"))
    job = services.sampling_job_create(project=project, model_path=str(smollm2_dir), generation_settings=SAMPLING,
                                       created_by=researcher)
    deadline = time.monotonic() + 300
    while job.is_active and time.monotonic() < deadline:
        time.sleep(0.5)
        job.refresh_from_db()
    assert job.status == SamplingJob.Status.SUCCEEDED, job.error
    return project


def test_a_conversation_is_shown_as_turns_without_special_tokens_and_ranked(
    page, live_server, annotator, researcher, settings, smollm2_dir, celery_worker_factory
):
    settings.MODEL_ROOTS = [smollm2_dir.parent]
    celery_worker_factory(queues=("gpu",), PREFLAB_MODEL_ROOTS=str(smollm2_dir.parent), OMP_NUM_THREADS="2")
    project = _sampled_chat_project(annotator, researcher, smollm2_dir)
    assert Response.objects.filter(prompt__project=project, source=Response.Source.MODEL).count() == 4

    open_annotation(page, live_server, project)
    prompt = Prompt.objects.get(project=project, external_id="c0")  # the queue hands out the oldest item first
    turns = page.locator("#prompt-turns .turn")
    assert turns.count() == 2
    assert [turns.nth(i).get_attribute("data-role") for i in range(2)] == ["system", "user"]
    for index, message in enumerate(prompt.messages):
        assert turns.nth(index).locator(".turn-role").inner_text().lower() == message["role"]
        assert turns.nth(index).locator(".md").inner_text().strip() == message["content"]
        assert turns.nth(index).is_visible()
    assert "system: You are" not in page.inner_text("#annotate-item")  # not the flattened text
    cards = page.locator(".response")
    assert cards.count() == 2
    for card in cards.all():
        assert card.locator(".turn-role").inner_text().lower() == "assistant"
    shown = page.inner_text("#annotate-item")
    assert not [token for token in SPECIAL_TOKENS if token in shown], shown
    assert not [token for token in SPECIAL_TOKENS if token in page.content()]

    order = cards.evaluate_all("cards => cards.map(card => Number(card.dataset.responseId))")
    page.keyboard.press("2")  # the first card shown is the worse one
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    wait_ranked(page, 1)
    ranking = Ranking.objects.get(annotator=annotator)
    assert ranking.prompt_id == prompt.pk and not ranking.skipped
    assert ranking.tiers == [[order[1]], [order[0]]]
    assert page.js_errors == []

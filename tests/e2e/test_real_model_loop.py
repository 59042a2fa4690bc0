"""The whole loop on a real chat model (SmolLM2-135M-Instruct), on a real Celery worker: chat prompts imported
as conversational JSONL, 2 responses each sampled through the chat template, ranked on the annotation page
(which shows the conversation's turns and no special token), exported as TRL conversational JSONL, then a reward-model run and a DPO run on the project's pairs and a 2-step GRPO run on its
prompts scored by that reward model, all succeeding with finite metrics; then round 2: responses sampled from the
DPO checkpoint through the project page's form into the same project, shown to the annotator beside round 1's
best-ranked ones, ranked into pairs that name both rounds, and the project page's win rate of round 2's model over
round 1's with its interval. Kept tiny: a few minutes on a CPU (each step's time is printed, for the README)."""

import json
import math
import re
import time

import pytest
from django.urls import reverse
from transformers import AutoTokenizer
from trl.data_utils import maybe_apply_chat_template

from tests.e2e.annotating import wait_ranked
from tests.e2e.conftest import log_in
from tests.webapp.experiments.helpers import run_status, wait_for
from webapp.annotation import services as annotation_services
from webapp.annotation.models import (
    Assignment,
    ImportJob,
    PreferencePair,
    Project,
    Prompt,
    Ranking,
    Response,
    Round,
    SamplingJob,
    Suggestion,
    SuggestionJob,
)
from webapp.experiments import services
from webapp.experiments.models import MetricRow, ModelRef, Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SYSTEM = "You are a helpful assistant. Answer in one sentence."
QUESTIONS = ("What is the capital of France?", "How many legs does a spider have?",
             "What colour is a ripe banana?", "What do bees make?")
SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
SAMPLING = {"responses_per_prompt": 2, "max_new_tokens": 40, "temperature": 0.7, "top_p": 0.9, "seed": 0}
# Prompts are ~35 tokens through the template; responses at most 40.
SHORT = {"batch_size": 2, "max_steps": 2, "max_length": 96, "max_prompt_length": 48}


def _chat_jsonl() -> bytes:
    """Half the rows in TRL's conversational prompt format, half as chat `messages`, as researchers bring them."""
    rows = []
    for index, question in enumerate(QUESTIONS):
        conversation = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        rows.append({"id": f"q{index}", ("prompt" if index % 2 else "messages"): conversation})
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _finite_metrics(run: Run) -> dict[str, float]:
    rows = list(MetricRow.objects.filter(run=run).order_by("step"))
    assert rows, f"run {run.name!r} logged no metrics"
    last = rows[-1].metrics
    bad = {name: value for row in rows for name, value in row.metrics.items()
           if not (isinstance(value, int | float) and math.isfinite(value))}
    assert not bad, f"run {run.name!r} logged non-finite metrics: {bad}"
    return last


def _wait_for_run(run: Run, *, timeout_s: float, worker) -> Run:
    wait_for(lambda: run_status(run.pk) not in (Run.Status.QUEUED, Run.Status.RUNNING), timeout_s=timeout_s,
             what=f"the {run.kind} run")
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, f"{run.kind} run {run.status}: {run.error}\n{worker.log_tail()}"
    return run


def test_sample_rank_export_and_train_on_smollm2(
    page, live_server, client, researcher, settings, smollm2_dir, celery_worker_factory, tmp_path
):
    settings.MODEL_ROOTS = [*settings.MODEL_ROOTS, smollm2_dir.parent]
    model = services.model_register(path=str(smollm2_dir), name="SmolLM2-135M-Instruct")
    worker = celery_worker_factory(queues=("default", "gpu"), PREFLAB_MODEL_ROOTS=str(smollm2_dir.parent),
                                   OMP_NUM_THREADS="2")
    client.force_login(researcher)
    took: dict[str, float] = {}
    clock = time.monotonic()

    def step(name: str) -> None:
        nonlocal clock
        took[name], clock = time.monotonic() - clock, time.monotonic()

    # 1. chat prompts imported through the project's import form, as conversational JSONL
    project = annotation_services.project_create(name="chat loop", mode=Project.Mode.PAIRWISE, responses_per_item=2,
                                                 members=[researcher])
    upload = tmp_path / "chat.jsonl"
    upload.write_bytes(_chat_jsonl())
    with upload.open("rb") as handle:
        client.post(reverse("annotation:project_import", args=[project.pk]), {"file": handle, "file_format": "auto"})
    wait_for(lambda: not ImportJob.objects.get(project=project).is_active, timeout_s=60, what="the import job")
    assert ImportJob.objects.get(project=project).status == ImportJob.Status.SUCCEEDED
    prompts = list(Prompt.objects.filter(project=project).order_by("external_id"))
    assert [prompt.messages[-1]["content"] for prompt in prompts] == list(QUESTIONS)
    assert all([message["role"] for message in prompt.messages] == ["system", "user"] for prompt in prompts)

    # 2. two responses each, sampled from SmolLM2 on the worker through its chat template
    job = annotation_services.sampling_job_create(project=project, model_path=model.path,
                                                  generation_settings=dict(SAMPLING), created_by=researcher)
    wait_for(lambda: SamplingJob.objects.get(pk=job.pk).status not in (SamplingJob.Status.QUEUED,
                                                                       SamplingJob.Status.RUNNING),
             timeout_s=600, what="the sampling job")
    job.refresh_from_db()
    assert job.status == SamplingJob.Status.SUCCEEDED, f"{job.error}\n{worker.log_tail()}"
    step("import and round 1 sampling")
    responses = list(Response.objects.filter(prompt__project=project))
    assert len(responses) == 2 * len(QUESTIONS)
    assert all(response.source_detail["chat_template"] for response in responses)
    assert not [r.text for r in responses if any(token in r.text for token in SPECIAL_TOKENS)]
    blank = [r.text for r in responses if not r.text.strip()]
    assert len(blank) <= 1, f"a chat model prompted through its template answers: {blank}"
    capital = Response.objects.filter(prompt__external_id="q0", prompt__project=project)
    assert any("Paris" in response.text for response in capital), [r.text for r in capital]

    # 3. ranked on the annotation page, A or B by key: the shorter non-empty answer (the guideline: concise)
    log_in(page, live_server, "rita", "rita-password-1")
    page.goto(f"{live_server.url}/annotate/{project.pk}/")
    texts = dict(Response.objects.filter(prompt__project=project).values_list("pk", "text"))
    for ranked in range(1, len(QUESTIONS) + 1):
        page.wait_for_selector(".response:focus")
        assert page.locator("#prompt-turns .turn").evaluate_all("turns => turns.map(t => t.dataset.role)") == [
            "system", "user"]
        assert not [token for token in SPECIAL_TOKENS if token in page.inner_text("body")]
        shown = [int(i) for i in page.locator(".response").evaluate_all("rs => rs.map(r => r.dataset.responseId)")]
        better = min(shown, key=lambda pk: (not texts[pk].strip(), len(texts[pk])))
        page.keyboard.press("a" if better == shown[0] else "b")
        wait_ranked(page, ranked)
    assert page.js_errors == []
    step("round 1 ranked in the browser")
    pair_count = PreferencePair.objects.filter(project=project).count()
    assert pair_count >= len(QUESTIONS) - 1  # a pair with an empty response is not kept

    # 4. the TRL export is conversational: prompt a list of messages, chosen / rejected one assistant message
    exported = client.get(reverse("annotation:project_export", args=[project.pk, "pairs.jsonl"]))
    rows = [json.loads(line) for line in b"".join(exported.streaming_content).decode().splitlines()]
    assert len(rows) == pair_count
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    for row in rows:
        assert [message["role"] for message in row["prompt"]] == ["system", "user"]
        assert [message["role"] for message in row["chosen"]] == ["assistant"]
        assert [message["role"] for message in row["rejected"]] == ["assistant"]
        # TRL itself reads the file: its templating gives ChatML text ending in the generation prompt
        templated = maybe_apply_chat_template({key: row[key] for key in ("prompt", "chosen", "rejected")}, tokenizer)
        assert templated["prompt"].endswith("<|im_start|>assistant\n")
        assert templated["chosen"].endswith("<|im_end|>\n")

    # 5. a reward model on the project's pairs, then DPO on them and GRPO on its prompts scored by that model
    pairs = {"type": "project_pairs", "project_id": project.pk}
    reward_run = services.run_create(kind="reward_model", config={"model": model.path, **SHORT, "lr": 1e-5},
                                     data_source=pairs, created_by=researcher, name="chat reward model")
    reward_run = _wait_for_run(reward_run, timeout_s=600, worker=worker)
    step("reward model, 2 steps")
    reward_checkpoint = ModelRef.objects.filter(run=reward_run).order_by("-step").first()
    assert reward_checkpoint is not None and reward_checkpoint.architecture == ModelRef.Architecture.CLASSIFIER
    assert "accuracy" in " ".join(_finite_metrics(reward_run))

    dpo_run = services.run_create(kind="dpo", config={"model": model.path, **SHORT, "beta": 0.1},
                                  data_source=pairs, created_by=researcher, name="chat dpo")
    grpo_run = services.run_create(
        kind="grpo",
        config={"model": model.path, **SHORT, "group_size": 2, "max_new_tokens": 16, "temperature": 1.0,
                "rewards": {}, "reward_model": reward_checkpoint.path, "beta": 0.04},
        data_source={"type": "project_prompts", "project_id": project.pk}, created_by=researcher, name="chat grpo")
    dpo_run = _wait_for_run(dpo_run, timeout_s=600, worker=worker)
    step("DPO, 2 steps")
    dpo_metrics = _finite_metrics(dpo_run)
    assert dpo_run.current_step == 2 and "loss" in dpo_metrics
    grpo_run = _wait_for_run(grpo_run, timeout_s=600, worker=worker)
    step("GRPO, 2 steps")
    grpo_metrics = _finite_metrics(grpo_run)
    assert grpo_run.current_step == 2 and "reward/reward_model" in " ".join(grpo_metrics), grpo_metrics
    assert Project.objects.get(pk=project.pk).prompts.count() == len(QUESTIONS)

    # 6. round 2: sampled from the DPO checkpoint through the project page's form, compared with round 1
    dpo_checkpoint = ModelRef.objects.filter(run=dpo_run).order_by("-step").first()
    assert dpo_checkpoint is not None and dpo_checkpoint.architecture == ModelRef.Architecture.CAUSAL_LM
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.fill("#id_model_path", dpo_checkpoint.name)
    for name, value in SAMPLING.items():
        page.fill(f"#id_{name}", str(value))
    assert page.locator("#id_compare_with option:checked").inner_text() == "the latest round"
    page.click("#sampling button[type=submit]")
    wait_for(lambda: SamplingJob.objects.filter(project=project, round__number=2).exclude(
        status__in=(SamplingJob.Status.QUEUED, SamplingJob.Status.RUNNING)).exists(),
        timeout_s=600, what="round 2's sampling job")
    second_job = SamplingJob.objects.select_related("round").get(project=project, round__number=2)
    assert second_job.status == SamplingJob.Status.SUCCEEDED, f"{second_job.error}\n{worker.log_tail()}"
    step("round 2 sampled from the DPO checkpoint")
    first_round, second_round = Round.objects.get(project=project, number=1), second_job.round
    assert second_round.compared_with == first_round and second_round.model == dpo_checkpoint.name
    new_items = list(Prompt.objects.filter(project=project, round=second_round).order_by("id"))
    assert len(new_items) == 2 * len(QUESTIONS)  # pairwise: each new response beside round 1's best, one item each
    assert all(item.origin_id and item.response_count == 2 for item in new_items)
    assert Response.objects.filter(round=second_round, copy_of__isnull=True).count() == 2 * len(QUESTIONS)
    # round 1's items are as they were
    assert sorted(Prompt.objects.filter(project=project, origin__isnull=True).values_list("response_count",
                                                                                          flat=True)) == [2] * 4

    # 7. the reward model of round 1 suggests answers to round 2, a job started from the Rounds card
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    form = page.locator("#suggestion-job-form")
    assert form.locator("select[name=round] option:checked").inner_text() == "round 2"
    form.locator("select[name=source]").select_option("reward_model")
    form.locator("select[name=reward_run]").select_option(str(reward_run.pk))
    form.locator("button[type=submit]").click()
    wait_for(lambda: SuggestionJob.objects.filter(project=project).exclude(
        status__in=(SuggestionJob.Status.QUEUED, SuggestionJob.Status.RUNNING)).exists(),
        timeout_s=600, what="the suggestion job")
    suggestion_job = SuggestionJob.objects.get(project=project)
    assert suggestion_job.status == SuggestionJob.Status.SUCCEEDED, f"{suggestion_job.error}\n{worker.log_tail()}"
    assert suggestion_job.round == second_round and suggestion_job.reward_run == reward_run
    suggestions = {s.prompt_id: s for s in Suggestion.objects.filter(job=suggestion_job)}
    assert set(suggestions) == {item.pk for item in new_items}
    for item in new_items:  # a ranking of the item's two responses, best first, with a confidence
        value = suggestions[item.pk].value
        assert sorted(pk for tier in value for pk in tier) == sorted(item.responses.values_list("pk", flat=True))
        assert 0.0 <= suggestions[item.pk].score <= 1.0 and suggestions[item.pk].agent == suggestion_job.agent
    step("suggestions for round 2 by the reward model")

    # 8. the annotator is shown round 2's items, each with the machine's suggestion marked (agent, confidence),
    # never filled in: the first one accepted with M, the others ranked by the annotator
    page.goto(f"{live_server.url}/annotate/{project.pk}/")
    texts = dict(Response.objects.filter(prompt__project=project).values_list("pk", "text"))
    rounds_of = dict(Response.objects.filter(prompt__project=project).values_list("pk", "round__number"))
    accepted_item = None
    for ranked in range(len(QUESTIONS) + 1, len(QUESTIONS) + len(new_items) + 1):
        page.wait_for_selector(".response:focus")
        shown = [int(i) for i in page.locator(".response").evaluate_all("rs => rs.map(r => r.dataset.responseId)")]
        assert sorted(rounds_of[pk] for pk in shown) == [1, 2], shown
        banner = page.locator("#suggestion")
        assert banner.locator(".machine-badge").inner_text().lower() == "machine"
        assert page.inner_text("#suggestion-source").startswith(f"Suggested by {suggestion_job.agent} · confidence")
        if accepted_item is None:
            accepted_item = Assignment.objects.get(pk=page.locator("#item-form").get_attribute("data-assignment"))
            page.keyboard.press("m")
        else:
            better = min(shown, key=lambda pk: (not texts[pk].strip(), len(texts[pk])))
            page.keyboard.press("a" if better == shown[0] else "b")
        wait_ranked(page, ranked)
    assert page.js_errors == []
    step("round 2 ranked in the browser, one suggestion accepted")
    # the rows say which answer came from a suggestion, and it is the suggestion as it was
    accepted = Ranking.objects.get(assignment=accepted_item)
    assert accepted.suggestion == suggestions[accepted_item.prompt_id]
    as_sets = lambda tiers: [frozenset(tier) for tier in tiers]  # noqa: E731 (a tie's order within its tier is none)
    assert as_sets(accepted.tiers) == as_sets(accepted.suggestion.value)
    own = Ranking.objects.filter(prompt__round=second_round).exclude(pk=accepted.pk)
    assert own.count() == len(new_items) - 1 and not own.filter(suggestion__isnull=False).exists()
    round_pairs = PreferencePair.objects.filter(prompt__round=second_round)
    assert round_pairs.exists()
    assert all({pair.chosen.round.number, pair.rejected.round.number} == {1, 2} for pair in round_pairs)
    exported = client.get(reverse("annotation:project_export", args=[project.pk, "pairs.jsonl"]))
    rows = [json.loads(line) for line in b"".join(exported.streaming_content).decode().splitlines()]
    assert {(row["chosen_round"], row["rejected_round"]) for row in rows} >= {(1, 1)}
    assert {frozenset((row["chosen_model"], row["rejected_model"])) for row in rows
            if row["chosen_round"] != row["rejected_round"]} == {frozenset((dpo_checkpoint.name, first_round.model))}

    # 9. the project page: round 2's model against round 1's, its win rate and interval; the reward model's
    # agreement with the annotators on round 2, the accepted answer left out
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    win_rate = page.inner_text("#round-2 .win-rate")
    assert re.match(r"\d+ % \(\d+–\d+ %\) \d+ won · \d+ tied · \d+ lost of \d+$", win_rate), win_rate
    # one comparison per ranked new item: A or B by key, so none tied but the accepted suggestion if it was a tie
    # (two identical responses score alike: the DPO checkpoint of 2 steps samples much as round 1's model did)
    tied = int(len(accepted.tiers) == 1)
    lost = win_rate.split(" lost")[0].rsplit(" ", 1)[1]
    assert win_rate.endswith(f" · {tied} tied · {lost} lost of {len(new_items)}"), win_rate
    source = page.locator(f"#suggestion-agreement tr[data-agent='{suggestion_job.agent}']")
    answers = " ".join(source.locator(".answers").inner_text().split())
    assert answers == f"{len(new_items) - 1} (1 left out: accepted a suggestion)", answers
    agreement = " ".join(source.locator(".accuracy").inner_text().split())
    assert re.fullmatch(r"\d+ % \(\d+–\d+ %\) of \d+ pairs \(\d+ of \d+\)", agreement), agreement
    step("project page's win rate and the reward model's agreement")

    # the figures, for whoever runs this with -s
    print(f"\nround 2 win rate over round 1: {win_rate}")
    print(f"reward model's agreement with the annotators on round 2: {' '.join(agreement.split())}")
    print("took: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in took.items()))
    print(f"\nsampled: {[r.text[:60] for r in responses]}")
    for run, metrics in ((reward_run, _finite_metrics(reward_run)), (dpo_run, dpo_metrics), (grpo_run, grpo_metrics)):
        took = (run.finished_at - run.started_at).total_seconds()
        print(f"{run.kind}: {took:.0f} s, last step {run.current_step}: "
              + ", ".join(f"{name}={value:.4g}" for name, value in sorted(metrics.items())))

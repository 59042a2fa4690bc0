"""Demo data for `make run`: a ranking, a pairwise, a thumbs and a ratings project of arithmetic prompts, and a chat
project whose responses a sampling job draws from SmolLM2-135M-Instruct (idempotent)."""

import json
import random

from django.contrib.auth.models import User

from trainer.builtin_datasets.arithmetic import problems, wrong_completion
from webapp.annotation import services
from webapp.annotation.importing import ImportRecord, parse_import
from webapp.annotation.models import Project, SamplingJob
from webapp.experiments.demo import chat_model
from webapp.text import counted

DEMO_GUIDELINES = """Rank the answers to each arithmetic question.

1. A **correct final answer** beats a wrong one.
2. Between correct answers, prefer the one whose steps are right and easy to follow.
3. Give equal ranks to answers you cannot tell apart; flag *all bad* when none is acceptable.
"""


def _records(responses_per_prompt: int, seed: int) -> list[ImportRecord]:
    rng = random.Random(seed)
    records = []
    for index, problem in enumerate(problems(2, "train", 10, seed=seed)):
        wrong = {wrong_completion(problem, rng) for _ in range(8)} - {problem.completion}
        count = rng.randint(2, responses_per_prompt) if responses_per_prompt > 2 else 2
        responses = [problem.completion, *sorted(wrong)[: count - 1]]
        rng.shuffle(responses)
        records.append(ImportRecord(
            line=index + 1, external_id=f"demo-{index}", text=problem.prompt, reference_answer=str(problem.answer),
            metadata={"task": "arithmetic", "level": 2}, responses=tuple(responses),
        ))
    return records


THUMBS_GUIDELINES = """Give each answer a thumb up when its **final answer is correct** and its steps hold, a thumb
down otherwise. Judge each answer on its own: several answers to one question may all be up, or all down.
"""
RATINGS_GUIDELINES = """Rate each answer on each aspect, 1 (poor) to 5 (excellent). Judge the aspects apart: a wrong
answer written clearly is low on correctness and high on clarity.
"""
# UltraFeedback's way: a response rated on several aspects, each with its description shown to the annotator
DEMO_ASPECTS = (
    {"name": "correctness", "description": "Is the final answer right, and are the steps right?"},
    {"name": "clarity", "description": "Are the steps easy to follow, with nothing missing or extra?"},
)
# name, mode, responses per item, guidelines, rating aspects
DEMO_PROJECTS = (
    ("Demo: arithmetic ranking", Project.Mode.RANKING, 4, DEMO_GUIDELINES, ()),
    ("Demo: arithmetic pairwise", Project.Mode.PAIRWISE, 2, DEMO_GUIDELINES, ()),
    ("Demo: arithmetic thumbs", Project.Mode.THUMBS, 3, THUMBS_GUIDELINES, ()),
    ("Demo: arithmetic ratings", Project.Mode.RATINGS, 3, RATINGS_GUIDELINES, DEMO_ASPECTS),
)


CHAT_PROJECT_NAME = "Demo: chat with SmolLM2"
CHAT_GUIDELINES = """Rank the assistant's answers to each conversation.

1. An answer that is **correct and answers the question** beats one that does not.
2. Between good answers, prefer the clearer and more concise one.
3. Give equal ranks when you cannot tell them apart; flag *all bad* when none is acceptable.
"""
CHAT_SYSTEM = "You are a helpful assistant. Answer in one or two sentences."
CHAT_QUESTIONS = (
    "What is the capital of France?",
    "Why is the sky blue?",
    "Give me one tip for sleeping better.",
    "What is the difference between weather and climate?",
    "How many legs does a spider have?",
    "Suggest a name for a small orange cat.",
)
# Two short answers per prompt: a pairwise item each, sampled by the demo's worker on a CPU in a minute or two.
CHAT_SAMPLING = {"responses_per_prompt": 2, "max_new_tokens": 96, "temperature": 0.7, "top_p": 0.9, "seed": 0}


def _chat_records() -> list[ImportRecord]:
    """The chat prompts as a conversational JSONL file would bring them: a system and a user turn each."""
    rows = [{"id": f"chat-{index}", "messages": [{"role": "system", "content": CHAT_SYSTEM},
                                                  {"role": "user", "content": question}]}
            for index, question in enumerate(CHAT_QUESTIONS)]
    return parse_import("".join(json.dumps(row) + "\n" for row in rows).encode(), file_format="jsonl")


def _demo_researcher(members: list[User]) -> User | None:
    return next((user for user in members if user.username == "researcher"), None)


def _seed_chat_project(stdout, members: list[User]) -> None:
    model = chat_model(stdout)
    if model is None:
        return
    project = Project.objects.filter(name=CHAT_PROJECT_NAME).first()
    if project is None:
        project = services.project_create(name=CHAT_PROJECT_NAME, mode=Project.Mode.PAIRWISE,
                                          guidelines=CHAT_GUIDELINES, responses_per_item=2, annotators_per_item=2,
                                          members=members, owner=_demo_researcher(members))
    summary = services.prompts_import(project=project, records=_chat_records())
    stdout.write(f"annotation demo '{CHAT_PROJECT_NAME}': {counted(summary.created, 'prompt')} added, "
                 f"{summary.already_present} present")
    existing = SamplingJob.objects.filter(project=project).order_by("-pk").first()
    if existing is not None:
        stdout.write(f"demo sampling job #{existing.pk} exists ({existing.status}) for '{CHAT_PROJECT_NAME}'")
        return
    researcher = _demo_researcher(members)
    job = services.sampling_job_create(project=project, model_path=model.name, generation_settings=dict(CHAT_SAMPLING),
                                       created_by=researcher)
    stdout.write(f"demo sampling job #{job.pk} queued: 2 responses per prompt from {model.name} (the worker runs it)")


def seed_demo_data(stdout) -> None:
    members = list(User.objects.filter(username__in=("researcher", "annotator")))
    for name, mode, per_item, guidelines, aspects in DEMO_PROJECTS:
        project = Project.objects.filter(name=name).first()
        if project is None:
            project = services.project_create(name=name, mode=mode, guidelines=guidelines, rating_aspects=aspects,
                                              responses_per_item=per_item, annotators_per_item=2, members=members,
                                              owner=_demo_researcher(members))
        summary = services.prompts_import(project=project, records=_records(per_item, seed=len(name)))
        stdout.write(f"annotation demo '{name}': {counted(summary.created, 'prompt')} added, {summary.already_present} present")
    _seed_chat_project(stdout, members)

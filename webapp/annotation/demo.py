"""Demo data for `make run`: a ranking and a pairwise project of arithmetic prompts (idempotent)."""

import random

from django.contrib.auth.models import User

from trainer.builtin_datasets.arithmetic import problems, wrong_completion
from webapp.annotation import services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Project
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


def seed_demo_data(stdout) -> None:
    members = list(User.objects.filter(username__in=("researcher", "annotator")))
    for name, mode, per_item in (("Demo: arithmetic ranking", Project.Mode.RANKING, 4),
                                 ("Demo: arithmetic pairwise", Project.Mode.PAIRWISE, 2)):
        project = Project.objects.filter(name=name).first()
        if project is None:
            project = services.project_create(name=name, mode=mode, guidelines=DEMO_GUIDELINES,
                                              responses_per_item=per_item, annotators_per_item=2, members=members)
        summary = services.prompts_import(project=project, records=_records(per_item, seed=len(name)))
        stdout.write(f"annotation demo '{name}': {counted(summary.created, 'prompt')} added, {summary.already_present} present")

"""Test data for the annotation tests (unit and browser): projects with prompts and responses."""

from django.contrib.auth.models import User

from webapp.accounts.services import user_create
from webapp.annotation import services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Project, Prompt, Response, Round


def make_project(
    *,
    items: int = 3,
    responses: int = 3,
    overlap: int = 1,
    mode: str = Project.Mode.RANKING,
    members: list[User] | None = None,
    owner: User | None = None,
    name: str = "Test project",
    texts: list[list[str]] | None = None,
    guidelines: str = "",
) -> Project:
    """Without guidelines by default: with them, an annotator's first visit shows them before the first item."""
    project = services.project_create(
        name=name, mode=mode, responses_per_item=responses, annotators_per_item=overlap,
        guidelines=guidelines, members=members or [], owner=owner,
    )
    rows = texts or [[f"answer {item}-{index}" for index in range(responses)] for item in range(items)]
    records = [
        ImportRecord(line=index + 1, external_id=f"item-{index}", text=f"Question {index}?", responses=tuple(row))
        for index, row in enumerate(rows)
    ]
    services.prompts_import(project=project, records=records)
    return project


def make_annotators(count: int, prefix: str = "ann") -> list[User]:
    return [user_create(username=f"{prefix}{index}", role="annotator", password="pw-long-enough-1")[0]
            for index in range(count)]


# Who ranked what in `make_disputed_project` (response texts, best tier first; None: skipped). The README
# («Annotators who disagree») states the rules and these counts.
DISPUTED_RANKINGS: dict[str, dict[str, list[list[str]] | None]] = {
    "ann0": {"Question 0?": [["a"], ["b"], ["c"]], "Question 1?": [["d"], ["e"], ["f"]]},
    "ann1": {"Question 0?": [["b"], ["a"], ["c"]], "Question 1?": [["e"], ["d", "f"]]},
    "ann2": {"Question 0?": [["a"], ["b"], ["c"]], "Question 1?": None},
}
# Pair rows each aggregation gives (strategy "all"). Question 0: {a,b} is 2 votes to 1 (majority keeps a > b, drop
# conflicts drops it), {a,c} and {b,c} all agree. Question 1: {d,e} is 1 vote each way (both drop it), {d,f} has one
# vote and {e,f} two that agree. Resolved (issue 32, the project's 2 answers and 0.6): Question 0 agrees on 7 of 9
# comparisons, a majority item (its 3 majority pairs); Question 1 on 1 of 3, in the adjudication queue (no row).
DISPUTED_PAIR_COUNTS = {"all": 14, "majority": 5, "drop_conflicts": 4, "resolved": 3, "annotator:ann0": 6,
                        "annotator:ann1": 5, "annotator:ann2": 3, "annotator:nobody": 0}


def make_disputed_project(*, owner: User | None = None) -> Project:
    """Two items of three responses, ranked by three annotators who disagree (DISPUTED_RANKINGS)."""
    annotators = make_annotators(3)
    project = make_project(items=2, overlap=3, texts=[["a", "b", "c"], ["d", "e", "f"]], members=annotators,
                           owner=owner, name="Disputed")
    rank_as_told(project, annotators, DISPUTED_RANKINGS)
    return project


def rank_as_told(project: Project, annotators: list[User],
                 rankings: dict[str, dict[str, list[list[str]] | None]]) -> None:
    """Each annotator ranks every item the queue gives them as `rankings[username][prompt text]` says (response
    texts, best tier first), or skips it where that is None."""
    from webapp.annotation.selectors import responses_shown

    for annotator in annotators:
        while (lease := services.assignment_lease_next(project=project, annotator=annotator)) is not None:
            tiers = rankings[annotator.username][lease.prompt.text]
            if tiers is None:
                services.ranking_skip(assignment_id=lease.pk, annotator=annotator)
                continue
            ids = {response.text: response.pk for response in responses_shown(prompt=lease.prompt, annotator=annotator)}
            services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                                    tiers=[[ids[text] for text in tier] for tier in tiers])


def add_round(project: Project, model: str, texts_per_prompt: dict[str, list[str]], **kwargs) -> Round:
    """A sampled round of `model` adding these texts to the prompts named by external id, as a sampling job does."""
    round_ = services.round_create(project=project, source=Round.Source.SAMPLED, model=model,
                                   responses_per_prompt=2, **kwargs)
    for external_id, texts in texts_per_prompt.items():
        prompt = Prompt.objects.get(project=project, external_id=external_id)
        services.round_responses_add(round_id=round_.pk, prompt_id=prompt.pk, texts=texts,
                                     source=Response.Source.MODEL, source_detail={"model": model})
    return round_

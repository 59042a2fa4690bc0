"""Rounds: each batch of responses added to a project (a sampling job's, or the API's) is a round.

A prompt with no response yet takes a round's responses itself (a first round), and more of that round while no
annotator has been given it. A prompt that holds responses otherwise is never changed: the round's responses go into new items made from it, each holding a copy of the
compared round's best-ranked response for that prompt beside as many of the new responses as the project shows
minus one, so every new item shows the new model against the one it is compared with.
"""

from collections import defaultdict
from collections.abc import Sequence

from django.core.exceptions import ValidationError
from django.db import transaction

from webapp.annotation import agreement
from webapp.annotation.models import Project, Prompt, Ranking, Response, Round
from webapp.annotation.modes import annotation_mode
from webapp.annotation.selectors import answers_as_tiers
from webapp.text import storable_text

PREVIOUS = "previous"


def round_create(
    *, project: Project, source: str, model: str, responses_per_prompt: int,
    compared_with: Round | None | str = PREVIOUS,
) -> Round:
    """The project's next round; compared with its latest round unless `compared_with` names one (or None)."""
    if isinstance(compared_with, Round) and compared_with.project_id != project.pk:
        raise ValidationError(f"compare with: round {compared_with.number} is not a round of this project")
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        latest = Round.objects.filter(project=project).order_by("-number").first()
        return Round.objects.create(
            project=project, number=(latest.number + 1) if latest else 1, source=source, model=model.strip(),
            responses_per_prompt=responses_per_prompt,
            compared_with=latest if compared_with == PREVIOUS else compared_with,
        )


def api_round(*, project: Project, model: str) -> Round:
    """The round of responses added through the API: the project's latest round while it is an API round of the
    same model (successive calls for one model's responses make one round), else a new one."""
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        latest = Round.objects.filter(project=project).order_by("-number").first()
        if latest is not None and latest.source == Round.Source.API and latest.model == model.strip():
            return latest
        return round_create(project=project, source=Round.Source.API, model=model, responses_per_prompt=0)


def api_responses_add(
    *, prompt: Prompt, texts: Sequence[str], source: str, source_detail: dict, model: str = ""
) -> list[Response]:
    """Responses added through the API: the API round of `model` (api_round), placed as any round's are."""
    with transaction.atomic():
        round_ = api_round(project=prompt.project, model=model)
        return round_responses_add(round_id=round_.pk, prompt_id=prompt.pk, texts=texts, source=source,
                                   source_detail=source_detail)


def round_responses_add(
    *, round_id: int, prompt_id: int, texts: Sequence[str], source: str, source_detail: dict
) -> list[Response]:
    """Add one round's responses for one prompt (an item made for a round stands for the prompt it repeats): into
    the prompt itself while it has none, else into new items beside the compared response."""
    with transaction.atomic():
        round_ = Round.objects.select_related("project").get(pk=round_id)
        prompt = Prompt.objects.select_for_update().get(pk=prompt_id)
        if prompt.origin_id is not None:
            prompt = Prompt.objects.select_for_update().get(pk=prompt.origin_id)
        if prompt.project_id != round_.project_id:
            raise ValidationError(f"prompt {prompt_id} is not in the project of round {round_.number}")
        new = [Response(text=storable_text(text), source=source, source_detail=source_detail, round=round_)
               for text in texts]
        # a prompt takes its first responses itself, and more of the same round while nobody has been shown it
        if prompt.response_count == 0 or (prompt.round_id == round_.pk and not prompt.assignments.exists()):
            return _store(prompt, new, set_round=round_)
        compared = compared_response(round_=round_, prompt=prompt)
        shown = annotation_mode(round_.project.mode).responses_shown(round_.project.responses_per_item)
        per_item = max(shown - 1, 1) if compared is not None else max(len(new), 1)
        created: list[Response] = []
        for start in range(0, len(new), per_item):
            item = _round_item(prompt, round_)
            copy = [] if compared is None else [Response(
                text=compared.text, source=compared.source, source_detail=compared.source_detail,
                round_id=compared.round_id, copy_of=compared)]
            created += _store(item, copy + new[start : start + per_item])[len(copy):]
        return created


def _store(prompt: Prompt, responses: list[Response], *, set_round: Round | None = None) -> list[Response]:
    for response in responses:
        response.prompt = prompt
    created = Response.objects.bulk_create(responses)
    prompt.response_count += len(created)
    fields = ["response_count"]
    if set_round is not None and prompt.round_id is None:
        prompt.round = set_round
        fields.append("round")
    prompt.save(update_fields=fields)
    return created


def _round_item(prompt: Prompt, round_: Round) -> Prompt:
    """A new item repeating `prompt` for `round_`, titled after it: `chat-0 · round 2` (then `· 2`, `· 3`, ...)."""
    # cut so that the title and its suffixes fit the column (200 characters)
    title = f"{prompt.external_id[:160]} · round {round_.number}"
    taken = set(Prompt.objects.filter(project_id=prompt.project_id, external_id__startswith=title)
                .values_list("external_id", flat=True))
    external_id, count = title, 1
    while external_id in taken:
        count += 1
        external_id = f"{title} · {count}"
    return Prompt.objects.create(
        project_id=prompt.project_id, external_id=external_id, text=prompt.text, messages=prompt.messages,
        reference_answer=prompt.reference_answer, metadata=prompt.metadata, annotatable=True, round=round_,
        origin=prompt,
    )


def compared_response(*, round_: Round, prompt: Prompt) -> Response | None:
    """What the round's new responses to `prompt` are set against: the compared round's best-ranked response to it
    (mean rank over the answers, a thumbs or ratings answer ranking by its labels; an unranked one after ranked ones, the oldest first); without a compared round,
    or when it has none for this prompt, the best-ranked of the prompt's own responses."""
    family = Prompt.objects.filter(pk=prompt.pk) | Prompt.objects.filter(origin_id=prompt.pk)
    originals = Response.objects.filter(prompt__in=family, copy_of__isnull=True).exclude(round=round_)
    candidates = list(originals.filter(round=round_.compared_with)) if round_.compared_with_id else []
    if not candidates:
        candidates = list(Response.objects.filter(prompt=prompt, copy_of__isnull=True))
    if not candidates:
        return None
    ranks: dict[int, list[int]] = defaultdict(list)
    ids = {response.pk for response in candidates}
    # a copy's ranks count for the response it copies
    original_of = dict(Response.objects.filter(prompt__in=family, copy_of__isnull=False)
                       .values_list("pk", "copy_of_id"))
    for _, tiers, all_bad in answers_as_tiers(Ranking.objects.filter(prompt__in=family, skipped=False)):
        if all_bad and len(tiers) <= 1:
            continue
        for response_id, position in agreement.positions(tiers).items():
            response_id = original_of.get(response_id, response_id)
            if response_id in ids:
                ranks[response_id].append(position)

    def order(response: Response) -> tuple[bool, float, int]:
        mean = sum(ranks[response.pk]) / len(ranks[response.pk]) if ranks[response.pk] else 0.0
        return (not ranks[response.pk], mean, response.pk)

    return min(candidates, key=order)


"""A project's items as records in Argilla's exported column schema (what Argilla 2.x's `to_datasets()` and
`to_hub` write; the read side of argilla.parquet, which webapp.annotation.argilla_import reads back):

- `id` (the item's external id), `status` ("completed" once it holds an answer, else "pending"), `prompt` (text,
  or chat messages in a project holding conversations), `response_1` ... `response_K` (K: the most responses of an
  item; null past an item's own);
- `ranking.responses` (each answer's order of the options "response_1" ...; ties, which Argilla 2.x's ranking
  value cannot hold, in the order of the tier; an imported pair is the ranking [chosen, rejected]), with
  `ranking.responses.users` (usernames; an imported answer's external annotator) and `ranking.responses.status`
  ("submitted");
- `thumb_<n>.responses` ("good" or "bad" on response n) and `<aspect>_<n>.responses` (the ratings of response n on
  an aspect), with their `.users` and `.status`;
- each suggestion's `<question>.suggestion`, `.suggestion.score`, `.suggestion.agent` (`<question>_<n>` for one
  on response n).
Read a chunk of items at a time, so memory holds one chunk.
"""

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db.models import Count, Max, Prefetch

from webapp.annotation.models import (
    PreferencePair,
    Project,
    Prompt,
    Ranking,
    Response,
    ResponseLabel,
    Suggestion,
)

CHUNK_ITEMS = 500
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_PER_RESPONSE = re.compile(r"^(.+?)[-_](\d+)$")
THUMB_QUESTION = "thumb"


@dataclass
class ArgillaLayout:
    """The columns a project's records need: fixed before the first row is written (a Parquet file types a column
    once)."""

    responses: int
    conversational: bool
    ranking: bool
    thumbs: bool
    aspects: list[str]
    integral_ratings: bool
    suggestions: dict[str, str] = field(default_factory=dict)  # column question -> its value's dtype


def question_name(text: str) -> str:
    """A name Argilla takes for a question (letters, digits, _ and -)."""
    return _NAME_UNSAFE.sub("_", text).strip("_") or "question"


def _suggestion_question(question: str, response_number: int | None) -> str:
    name = question_name(question)
    if response_number is None:
        return name
    numbered = _PER_RESPONSE.match(name)
    return name if numbered and int(numbered.group(2)) == response_number else f"{name}_{response_number}"


def argilla_layout(project: Project) -> ArgillaLayout:
    from webapp.annotation.selectors import project_has_conversations

    most = (Prompt.objects.filter(project=project).annotate(count=Count("responses"))
            .aggregate(most=Max("count"))["most"]) or 0
    labels = ResponseLabel.objects.filter(project=project)
    ratings = labels.exclude(aspect=ResponseLabel.THUMB)
    numbers = _response_numbers(project)
    suggestions: dict[str, set[str]] = {}
    for question, response_id, value in Suggestion.objects.filter(project=project).values_list(
            "question", "response_id", "value").iterator(chunk_size=2000):
        column = _suggestion_question(question, numbers.get(response_id))
        suggestions.setdefault(column, set()).add(_value_dtype(value))
    return ArgillaLayout(
        responses=most,
        conversational=project_has_conversations(project_id=project.pk),
        ranking=(Ranking.objects.filter(prompt__project=project, skipped=False).exclude(tiers=[]).exists()
                 or PreferencePair.objects.filter(project=project, ranking__isnull=True).exists()),
        thumbs=labels.filter(aspect=ResponseLabel.THUMB).exists(),
        aspects=sorted({question_name(aspect) for aspect in ratings.values_list("aspect", flat=True).distinct()}),
        integral_ratings=all(float(value).is_integer() for value in ratings.values_list("value", flat=True)),
        suggestions={column: types.pop() if len(types) == 1 else "json" for column, types in suggestions.items()},
    )


def _response_numbers(project: Project) -> dict[int, int]:
    """Each response's number in its item (1 for its first), as the response_<n> columns number them."""
    numbers: dict[int, int] = {}
    current, number = None, 0
    for response_id, prompt_id in (Response.objects.filter(prompt__project=project).order_by("prompt_id", "id")
                                   .values_list("id", "prompt_id").iterator(chunk_size=5000)):
        number = number + 1 if prompt_id == current else 1
        current = prompt_id
        numbers[response_id] = number
    return numbers


def _value_dtype(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return "list:string"
    return "json"


def argilla_features(layout: ArgillaLayout):  # -> datasets.Features
    from datasets import Features, List, Value

    text = Value("string")
    columns = {"id": text, "status": text,
               "prompt": List({"role": text, "content": text}) if layout.conversational else text}
    columns.update({f"response_{number}": text for number in range(1, layout.responses + 1)})

    def question(name: str, value) -> None:
        columns[f"{name}.responses"] = List(value)
        columns[f"{name}.responses.users"] = List(text)
        columns[f"{name}.responses.status"] = List(text)

    if layout.ranking:
        question("ranking", List(text))
    for number in range(1, layout.responses + 1):
        if layout.thumbs:
            question(f"{THUMB_QUESTION}_{number}", text)
        for aspect in layout.aspects:
            question(f"{aspect}_{number}", Value("int64" if layout.integral_ratings else "float64"))
    for name, dtype in sorted(layout.suggestions.items()):
        columns[f"{name}.suggestion"] = (List(text) if dtype == "list:string"
                                         else Value("string" if dtype == "json" else dtype))
        columns[f"{name}.suggestion.score"] = Value("float64")
        columns[f"{name}.suggestion.agent"] = text
    return Features(columns)


def argilla_rows(project: Project, layout: ArgillaLayout) -> Iterator[dict]:
    import json

    prompts = (Prompt.objects.filter(project=project).order_by("id").prefetch_related(
        Prefetch("responses", queryset=Response.objects.order_by("id")),
        Prefetch("rankings", queryset=Ranking.objects.filter(skipped=False).exclude(tiers=[])
                 .select_related("annotator").order_by("id")),
        Prefetch("labels", queryset=ResponseLabel.objects.select_related("annotator").order_by("id")),
        Prefetch("pairs", queryset=PreferencePair.objects.filter(ranking__isnull=True).order_by("id"),
                 to_attr="imported_pairs"),
        Prefetch("suggestions", queryset=Suggestion.objects.order_by("id")),
    ))
    iterator = prompts.iterator(chunk_size=CHUNK_ITEMS)
    while chunk := list(itertools.islice(iterator, CHUNK_ITEMS)):
        for prompt in chunk:
            responses = list(prompt.responses.all())
            number = {response.pk: index + 1 for index, response in enumerate(responses)}
            row: dict = {"id": prompt.external_id,
                         "prompt": prompt.messages or ([{"role": "user", "content": prompt.text}]
                                                       if layout.conversational else prompt.text)}
            row.update({f"response_{number[response.pk]}": response.text for response in responses})
            answers: dict[str, list[tuple[object, str]]] = {}
            for ranking in prompt.rankings.all():
                order = [f"response_{number[rid]}" for tier in ranking.tiers for rid in tier if rid in number]
                answers.setdefault("ranking", []).append((order, ranking.annotator.get_username()))
            for pair in prompt.imported_pairs:
                answers.setdefault("ranking", []).append(
                    ([f"response_{number[pair.chosen_id]}", f"response_{number[pair.rejected_id]}"], ""))
            for label in prompt.labels.all():
                who = label.annotator.get_username() if label.annotator else label.external_annotator
                if label.aspect == ResponseLabel.THUMB:
                    name, value = f"{THUMB_QUESTION}_{number[label.response_id]}", "good" if label.value else "bad"
                else:
                    name = f"{question_name(label.aspect)}_{number[label.response_id]}"
                    value = int(label.value) if layout.integral_ratings else label.value
                answers.setdefault(name, []).append((value, who))
            for name, given in answers.items():
                row[f"{name}.responses"] = [value for value, _ in given]
                row[f"{name}.responses.users"] = [who for _, who in given]
                row[f"{name}.responses.status"] = ["submitted"] * len(given)
            row["status"] = "completed" if answers else "pending"
            for suggestion in prompt.suggestions.all():
                name = _suggestion_question(suggestion.question, number.get(suggestion.response_id))
                value = suggestion.value
                row[f"{name}.suggestion"] = json.dumps(value) if layout.suggestions[name] == "json" else value
                row[f"{name}.suggestion.score"] = suggestion.score
                row[f"{name}.suggestion.agent"] = suggestion.agent
            yield row

"""A run's data source (built-in arithmetic, a project's pairs or prompts, an uploaded file): what each kind of
run accepts, and the training rows it becomes, in the trainer's row format. Reads only.

A project's preference data ("project_pairs") gives a kind that trains on pairs the project's pairs (a ratings
project's binarized ones), and a kind that trains on unpaired rows (KTO) the project's unpaired rows from thumbs,
rankings and ratings alike (webapp.annotation.feedback states both rules).

A project's rows are in TRL's formats (trainer.formats.chat formats them for the model): a conversation prompt gives
conversational rows (prompt = its messages, chosen / rejected / completion = one assistant message), a text
prompt standard text rows."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError

from trainer.builtin_datasets import arithmetic
from trainer.formats.jsonl import JsonlError, numbered_jsonl_lines, read_jsonl_file, text_lines
from trainer.kinds import run_kind
from trainer.rewards import reward_row_fields, row_has_field
from webapp.annotation import selectors as annotation_selectors
from webapp.annotation.aggregation import AggregationError, aggregation_check
from webapp.annotation.feedback import (
    DEFAULT_BINARIZATION,
    DEFAULT_SEED,
    BinarizationError,
    binarization_check,
)

DATA_SOURCE_TYPES = ("arithmetic", "project_pairs", "project_prompts", "upload")
ARITHMETIC_EVAL_ROWS = 8
# a kept upload was checked a line at a time under the same bound (services.launches.UPLOAD_LINE_MAX_BYTES)
KEPT_UPLOAD_LINE_MAX_BYTES = 64 * 2**20


def data_source_check(kind: str, source: Mapping[str, Any]) -> None:
    """Refuse a data source a run of `kind` cannot train on, naming the form field at fault."""
    source_type = source.get("type")
    if source_type not in DATA_SOURCE_TYPES:
        raise ValidationError({"data_source": f"unknown data source {source_type!r}"})
    if source_type == "arithmetic":
        level, size = source.get("level"), source.get("size")
        if level not in (1, 2, 3):
            raise ValidationError({"level": f"must be 1, 2 or 3, got {level!r}"})
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValidationError({"size": f"must be a positive number of problems, got {size!r}"})
        limit = arithmetic.train_problem_limit(level)
        if size > limit:
            raise ValidationError({"size": f"must be at most {limit} at level {level} ({_level_limit_reason(level)}), "
                                           f"got {size}"})
    elif source_type == "project_pairs" and run_kind(kind).online:
        raise ValidationError({"data_source": f"{kind} trains on prompts: choose a project's prompts"})
    elif source_type == "project_prompts" and not run_kind(kind).online:
        wanted = ("a project's thumbs, rankings or ratings (its unpaired rows)" if run_kind(kind).rows == "unpaired"
                  else "preference pairs")
        raise ValidationError({"data_source": f"{kind} needs {wanted} or an uploaded file, not prompts"})
    elif source_type == "upload" and not Path(str(source.get("path", ""))).is_file():
        raise ValidationError({"upload": "the uploaded file is missing; upload it again"})
    if source_type.startswith("project_") and not isinstance(source.get("project_id"), int):
        raise ValidationError({"project": "choose a project"})
    if source_type == "project_pairs":
        try:
            aggregation_check(source.get("aggregation", "all"))
        except AggregationError as error:
            raise ValidationError({"aggregation": str(error)}) from None
        options = ratings_binarization(source)
        try:
            binarization_check(options["binarization"], options["seed"])
        except BinarizationError as error:
            field, _, problem = str(error).partition(": ")
            raise ValidationError({SOURCE_BINARIZATION_KEYS[field]: problem}) from None


def data_source_rewards_check(kind: str, config: Mapping[str, Any], source: Mapping[str, Any]) -> None:
    """Refuse the rewards of an online run whose checked data source lacks a row field one of them reads (e.g.
    answer_match on prompts without a reference answer, where every reward would be 0 or the first step fails),
    naming the reward, the field and how many rows lack it."""
    if not run_kind(kind).online:
        return
    for reward, fields in reward_row_fields(config.get("rewards") or {}).items():
        for field in fields:
            counted = _rows_having(source, field)
            if counted is None:
                continue
            having, total = counted
            if having < total:
                lacking = "have none" if having == 0 else f"lack it in {total - having}"
                raise ValidationError({f"rewards.{reward}": (
                    f"reward {reward} needs each prompt's `{field}`; {_rows_described(source)} {lacking} "
                    f"({having} of {total} have one): give every row its {field}, or leave {reward} out")})


def _rows_described(source: Mapping[str, Any]) -> str:
    if source["type"] == "upload":
        return f"the rows of {source.get('name') or 'the uploaded file'}"
    return f"project {source['project_id']}'s prompts"


def _rows_having(source: Mapping[str, Any], field: str) -> tuple[int, int] | None:
    """(rows holding `field`, rows) of a data source, or None where every row holds what rewards read (the built-in
    task) or the source's rows are not the prompts a reward reads."""
    if source["type"] == "project_prompts":
        if field == "answer":
            return (annotation_selectors.training_prompt_with_answer_count(project_id=source["project_id"]),
                    annotation_selectors.training_prompt_count(project_id=source["project_id"]))
        rows = annotation_selectors.prompts_for_training(project_id=source["project_id"])
        return sum(row_has_field(row, field) for row in rows), len(rows)
    if source["type"] == "upload":
        return _upload_rows_having(Path(source["path"]), field)
    return None


def _upload_rows_having(path: Path, field: str) -> tuple[int, int]:
    """Read a line at a time: a kept upload may be as large as the upload limit."""
    having = total = 0
    try:
        with path.open("rb") as stream:
            lines = text_lines(stream, name=path.name, max_line_bytes=KEPT_UPLOAD_LINE_MAX_BYTES)
            for _, row in numbered_jsonl_lines(lines, name=path.name):
                total += 1
                having += row_has_field(row, field)
    except (OSError, JsonlError) as error:
        raise ValidationError({"upload": f"the uploaded file cannot be read ({error}); upload it again"}) from None
    return having, total


def _level_limit_reason(level: int) -> str:
    if level == 3:
        return "a sample of its millions of problems, generated on the worker"
    return "all the training problems the level holds"


def data_source_rows(kind: str, source: Mapping[str, Any]) -> int | None:
    """How many training rows a checked data source gives a run of `kind` now (what its batch size is bounded by), or
    None where that is not known (an upload stored before its rows were counted)."""
    source_type = source["type"]
    if source_type == "arithmetic":
        return min(source["size"], arithmetic.train_problem_limit(source["level"]))
    if source_type == "upload":
        return source.get("rows")
    if source_type == "project_prompts":
        return annotation_selectors.training_prompt_count(project_id=source["project_id"])
    if run_kind(kind).rows == "unpaired":
        return annotation_selectors.unpaired_count(project_id=source["project_id"], aggregation=pair_aggregation(source),
                                                   **ratings_binarization(source))
    return annotation_selectors.pair_count(project_id=source["project_id"], aggregation=pair_aggregation(source),
                                           **ratings_binarization(source))


def pair_aggregation(source: Mapping[str, Any]) -> str:
    """How a project's pairs source combines disagreeing annotators: "all" for a source stored before it was named."""
    return source.get("aggregation", "all")


# the selectors' option -> its key in a project source (`binarization_seed`: the config has a `seed` of its own)
SOURCE_BINARIZATION_KEYS = {"binarization": "binarization", "seed": "binarization_seed"}


def ratings_binarization(source: Mapping[str, Any]) -> dict[str, Any]:
    """How a project's ratings become pairs for a run (webapp.annotation.feedback): the defaults where not named."""
    return {"binarization": source.get("binarization", DEFAULT_BINARIZATION),
            "seed": source.get("binarization_seed", DEFAULT_SEED)}


def _arithmetic_rows(kind: str, level: int, split: str, count: int) -> list[dict]:
    if level == 1:
        count = min(count, len(arithmetic.problems(1, split)))  # level 1 has only 100 problems in all
    return arithmetic.rows_for_kind(kind, level, split, count)


def training_rows(kind: str, source: Mapping[str, Any]) -> tuple[list[dict], list[dict] | None]:
    """(training rows, held-out rows or None) for a run's data source, in the trainer's row format."""
    source_type = source["type"]
    if source_type == "arithmetic":
        return (
            _arithmetic_rows(kind, source["level"], "train", source["size"]),
            _arithmetic_rows(kind, source["level"], "test", ARITHMETIC_EVAL_ROWS),
        )
    if source_type == "upload":
        return read_jsonl_file(source["path"]), None
    if source_type == "project_prompts":
        return annotation_selectors.prompts_for_training(project_id=source["project_id"]), None
    if run_kind(kind).rows == "unpaired":
        return annotation_selectors.unpaired_for_training(project_id=source["project_id"],
                                                          aggregation=pair_aggregation(source),
                                                          **ratings_binarization(source)), None
    pairs = annotation_selectors.preference_pairs_for_training(project_id=source["project_id"],
                                                               aggregation=pair_aggregation(source),
                                                               **ratings_binarization(source))
    if run_kind(kind).rows == "completions":
        return [{"prompt": pair["prompt"], "completion": pair["chosen"]} for pair in pairs], None
    return pairs, None

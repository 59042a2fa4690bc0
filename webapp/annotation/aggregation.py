"""How the pairs of annotators who disagree become training data: one function over pair rows, for export and runs.

A pair is one prompt's two responses, in either order (compared by content: the prompt and the two texts). Each row
is one vote for its direction: an annotator ranks an item once, so they vote once on each of its pairs; an imported
pair (no annotator) is one vote too.

- `all`: every row, as stored (two annotators who disagree give two opposite rows).
- `majority`: one row a pair, in the direction more votes chose; a tie between the directions drops the pair.
- `drop_conflicts`: one row a pair whose votes all agree; a pair with votes both ways is dropped.
- `annotator:<username>`: only that annotator's rows.
- `resolved`: only the rows of resolved items (a row's `label_source`, webapp.annotation.label_sources: unanimous,
  majority, adjudicated, and imported rows), then one row a pair as `majority`; an unresolved item gives no row.

One row a pair is the earliest row of the kept direction, unchanged (its weight, margin, ranking id and annotator).
An adjudicated item's rows are the researcher's decision under the modes that pick one answer (`majority`,
`drop_conflicts`, `resolved`: `picks_one_answer`); under `all` and `annotator:` they stay every annotator's own rows,
as given (selectors.pair_rows puts the decision's rows in their place).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator

from webapp.annotation.label_sources import UNRESOLVED

AGGREGATIONS = ("all", "majority", "drop_conflicts", "resolved")
ANNOTATOR_PREFIX = "annotator:"
# What the API's schema says a mode is (a username holds no whitespace), and the rule `aggregation_check` applies.
AGGREGATION_PATTERN = r"^(all|majority|drop_conflicts|resolved|annotator:\S+)$"
# the modes under which an adjudicated item's rows are the decision's, not the annotators'
ONE_ANSWER_AGGREGATIONS = ("majority", "drop_conflicts", "resolved")


class AggregationError(ValueError):
    pass


def aggregation_check(mode: object) -> str:
    """The mode itself, or AggregationError naming what is wrong with it."""
    if not isinstance(mode, str):
        raise AggregationError(f"aggregation must be text, got {mode!r}")
    if re.fullmatch(AGGREGATION_PATTERN[1:-1], mode):
        return mode
    raise AggregationError(f"unknown aggregation {mode!r}; choose one of {', '.join(AGGREGATIONS)} or "
                           f"{ANNOTATOR_PREFIX}<username>")


def aggregation_annotator(mode: str) -> str | None:
    """The username an `annotator:<username>` mode keeps, else None."""
    return mode[len(ANNOTATOR_PREFIX):] if mode.startswith(ANNOTATOR_PREFIX) else None


def picks_one_answer(mode: str) -> bool:
    """Whether `mode` takes an adjudicated item's decision in place of its annotators' rows."""
    return mode in ONE_ANSWER_AGGREGATIONS


def aggregate_pairs(rows: Iterable[dict], mode: str) -> Iterator[dict]:
    """The rows `mode` keeps, in their order (see the module's rules). `all` and `annotator:` stream; `majority` and
    `drop_conflicts` read every row first, since a later vote can overturn a pair. An unknown mode is refused at
    once (AggregationError), before any row is read."""
    aggregation_check(mode)
    if mode == "all":
        return iter(rows)
    annotator = aggregation_annotator(mode)
    if annotator is not None:
        return (row for row in rows if row.get("annotator") == annotator)
    if mode == "resolved":
        return _one_row_a_pair((row for row in rows if row.get("label_source") != UNRESOLVED), "majority")
    return _one_row_a_pair(rows, mode)


def _one_row_a_pair(rows: Iterable[dict], mode: str) -> Iterator[dict]:
    votes: dict[tuple, dict[tuple, list[dict]]] = {}
    for row in rows:
        prompt_key, direction = _pair_key(row)
        votes.setdefault(prompt_key, {}).setdefault(direction, []).append(row)
    for directions in votes.values():
        kept = _kept_direction(list(directions.values()), mode)
        if kept is not None:
            yield kept[0]


def _kept_direction(directions: list[list[dict]], mode: str) -> list[dict] | None:
    if len(directions) == 1:
        return directions[0]
    if mode == "drop_conflicts":
        return None
    first, second = directions
    if len(first) == len(second):
        return None
    return first if len(first) > len(second) else second


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _pair_key(row: dict) -> tuple[tuple, tuple]:
    """(the unordered pair, its direction): the row's prompt and the two texts sorted, and (chosen, rejected)."""
    chosen, rejected = _text(row["chosen"]), _text(row["rejected"])
    return (_text(row["prompt"]), *sorted((chosen, rejected))), (chosen, rejected)

"""A ranking project with known disputes for adjudication (issue 32): six items of three responses (x, y, z),
three annotators, the project's rule at 3 answers and agreement 0.6. Each item's agreement is the share of its 9
comparisons (3 annotator pairs × 3 response pairs) that agree."""

from __future__ import annotations

from django.contrib.auth.models import User

from tests.webapp.annotation.factories import make_annotators, make_project
from webapp.annotation import services
from webapp.annotation.models import Project

XYZ, YXZ, ZYX, YZX, ZXY = ([["x"], ["y"], ["z"]], [["y"], ["x"], ["z"]], [["z"], ["y"], ["x"]], [["y"], ["z"], ["x"]],
                           [["z"], ["x"], ["y"]])
# item text -> annotator -> tiers of response texts (None: skipped)
DISPUTES: dict[str, dict[str, list[list[str]] | None]] = {
    "Question 0?": {"ann0": XYZ, "ann1": XYZ, "ann2": XYZ},  # 9/9: unanimous
    "Question 1?": {"ann0": XYZ, "ann1": XYZ, "ann2": YXZ},  # 7/9: majority (x > y by 2 votes to 1)
    "Question 2?": {"ann0": XYZ, "ann1": ZYX, "ann2": XYZ},  # 3/9: queued
    "Question 3?": {"ann0": XYZ, "ann1": YZX, "ann2": ZXY},  # 3/9 (a cycle): queued, after item 2 (same agreement)
    "Question 4?": {"ann0": XYZ, "ann1": XYZ, "ann2": YZX},  # 5/9: queued last
    "Question 5?": {"ann0": XYZ, "ann1": YXZ, "ann2": None},  # 1 of 2 answers each way on x, y; too few to queue
}
AGREEMENTS = {"Question 0?": 1.0, "Question 1?": 7 / 9, "Question 2?": 3 / 9, "Question 3?": 3 / 9,
              "Question 4?": 5 / 9, "Question 5?": 2 / 3}
SOURCES = {"Question 0?": "unanimous", "Question 1?": "majority", "Question 2?": "unresolved",
           "Question 3?": "unresolved", "Question 4?": "unresolved", "Question 5?": "unresolved"}
QUEUE = ["Question 2?", "Question 3?", "Question 4?"]
# (prompt, chosen, rejected) that `resolved` yields: the unanimous and the majority items, majority direction
RESOLVED_PAIRS = {("Question 0?", "x", "y"), ("Question 0?", "x", "z"), ("Question 0?", "y", "z"),
                  ("Question 1?", "x", "y"), ("Question 1?", "x", "z"), ("Question 1?", "y", "z")}


def make_adjudication_project(*, owner: User | None = None) -> Project:
    annotators = make_annotators(3)
    project = make_project(items=6, overlap=3, texts=[["x", "y", "z"]] * 6, members=annotators, owner=owner,
                           name="Adjudication")
    Project.objects.filter(pk=project.pk).update(adjudication_min_answers=3, adjudication_threshold=0.6)
    from webapp.annotation.selectors import responses_shown

    for annotator in annotators:
        while (lease := services.assignment_lease_next(project=project, annotator=annotator)) is not None:
            tiers = DISPUTES[lease.prompt.text][annotator.username]
            if tiers is None:
                services.ranking_skip(assignment_id=lease.pk, annotator=annotator)
                continue
            ids = {response.text: response.pk for response in responses_shown(prompt=lease.prompt, annotator=annotator)}
            services.ranking_submit(assignment_id=lease.pk, annotator=annotator,
                                    tiers=[[ids[text] for text in tier] for tier in tiers],
                                    rationale=f"{annotator.username} on {lease.prompt.text}")
    project.refresh_from_db()
    return project

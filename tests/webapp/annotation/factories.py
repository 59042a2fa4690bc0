"""Test data for the annotation tests (unit and browser): projects with prompts and responses."""

from django.contrib.auth.models import User

from webapp.accounts.services import user_create
from webapp.annotation import services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Project


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
) -> Project:
    project = services.project_create(
        name=name, mode=mode, responses_per_item=responses, annotators_per_item=overlap,
        guidelines="Prefer **correct** answers.", members=members or [], owner=owner,
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

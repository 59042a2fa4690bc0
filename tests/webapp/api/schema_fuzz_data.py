"""A small database for the schema fuzzer (tests/webapp/api/test_schema_fuzz.py), so its requests reach the
endpoints' code and not only their 404s: a project with prompts, responses, members and a ranking; a finished
trainer run with metric rows and checkpoints (resume, fork); a running external run with rows and samples (log,
heartbeat, finish). Also used by hand to seed a dev server for the schemathesis CLI:

    python manage.py shell -c "from tests.webapp.api.schema_fuzz_data import seed_by_hand; seed_by_hand('DIR')"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth.models import User

from tests.webapp.experiments.helpers import finished_run_with_checkpoints, register_tiny_model
from webapp.accounts.services import api_token_create, user_create
from webapp.annotation import services as annotation_services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Project
from webapp.experiments import services as run_services


@dataclass(frozen=True)
class Seeded:
    token: str
    project_id: int
    prompt_id: int
    run_id: int
    external_run_id: int
    member: str


def seed_api_data(*, researcher: User, model_dir: Path) -> Seeded:
    """The rows the fuzzer's requests are sent to (MODEL_ROOTS must hold `model_dir`'s parent, and the broker is
    not needed: the runs are queued nowhere until the transaction commits)."""
    annotator, _ = user_create(username="fuzz-annotator", role="annotator", password="fuzz-annotator-password-1")
    project = annotation_services.project_create(name="fuzzed", responses_per_item=2,
                                                 members=[researcher, annotator])
    annotation_services.prompts_import(project=project, records=[
        ImportRecord(line=index, external_id=f"p{index}", text=f"{index} + {index} = ?",
                     responses=(str(2 * index), str(2 * index + 1)))
        for index in range(1, 4)
    ])
    _rank_one(project, annotator)
    model = register_tiny_model(model_dir)
    run = finished_run_with_checkpoints(model, model_dir, researcher)
    external = run_services.external_run_create(name="logged outside", config={"lr": 0.1}, created_by=researcher,
                                                project_id=project.pk, total_steps=100)
    run_services.external_metrics_log(run_id=external.pk, rows=[
        {"step": step, "metrics": {"loss": 1 / step, "reward/mean": step / 10}} for step in range(1, 11)])
    run_services.external_samples_log(run_id=external.pk, batch_id="seed", samples=[
        {"step": 10, "prompt": "2+2?", "completion": "4", "rewards": {"exact": 1.0}, "advantage": 0.5}])
    _, token = api_token_create(user=researcher, name="schema fuzzer")
    return Seeded(token=token, project_id=project.pk, prompt_id=project.prompts.order_by("pk").first().pk,
                  run_id=run.pk, external_run_id=external.pk, member=annotator.username)


def _rank_one(project: Project, annotator: User) -> None:
    assignment = annotation_services.assignment_lease_next(project=project, annotator=annotator)
    shown = [response.pk for response in assignment.prompt.responses.order_by("pk")]
    annotation_services.ranking_submit(assignment_id=assignment.pk, annotator=annotator,
                                       tiers=[[shown[0]], [shown[1]]])


def seed_by_hand(model_dir: str) -> None:
    """Seed a dev server's database and print the ids and token the CLI needs."""
    researcher, _ = user_create(username="fuzz-researcher", role="researcher", password="fuzz-researcher-password-1")
    print(seed_api_data(researcher=researcher, model_dir=Path(model_dir)))

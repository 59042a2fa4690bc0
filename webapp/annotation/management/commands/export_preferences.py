"""manage.py export_preferences --project NAME_OR_ID --format jsonl|csv|dataset|rankings|parquet|argilla --output PATH."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.annotation import exporting, selectors
from webapp.annotation.aggregation import AggregationError, aggregation_check
from webapp.annotation.models import Project
from webapp.annotation.preferences import STRATEGIES
from webapp.text import counted

EXPORT_FORMATS = ("jsonl", "csv", "dataset", "rankings", "parquet", "argilla")


def project_from_option(value: str) -> Project:
    project = Project.objects.filter(pk=int(value)).first() if value.isdigit() else None
    project = project or Project.objects.filter(name=value).first()
    if project is None:
        raise CommandError(f"--project {value!r}: no project with that name or id")
    return project


class Command(BaseCommand):
    help = ("Export a project's preference pairs (TRL JSONL, CSV, Parquet, a datasets directory), its raw rankings, or "
            "its records in Argilla's column schema (Parquet).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project name or id")
        parser.add_argument("--format", choices=EXPORT_FORMATS, default="jsonl")
        parser.add_argument("--strategy", choices=STRATEGIES, default="all")
        parser.add_argument("--aggregation", default="all",
                            help="all | majority | drop_conflicts | resolved | annotator:USERNAME (the README, «Annotators who disagree»)")
        parser.add_argument("--output", type=Path, required=True, help="a file, or a directory for --format dataset")

    def handle(self, *args: object, **options) -> None:
        project = project_from_option(options["project"])
        output: Path = options["output"]
        try:
            aggregation = aggregation_check(options["aggregation"])
        except AggregationError as error:
            raise CommandError(f"--aggregation: {error}") from None
        pairs = selectors.pair_rows(project_id=project.pk, strategy=options["strategy"], aggregation=aggregation)
        conversational = selectors.project_has_conversations(project_id=project.pk)
        if options["format"] in ("parquet", "argilla"):
            count = _parquet(project, pairs, output, argilla=options["format"] == "argilla",
                             conversational=conversational)
        elif options["format"] == "dataset":
            try:
                count = exporting.save_dataset(pairs, output, conversational=conversational)
            except ValueError as error:
                raise CommandError(str(error)) from None
        else:
            lines = {
                "jsonl": lambda: exporting.jsonl_lines(exporting.conversational_rows(pairs) if conversational else pairs),
                "csv": lambda: exporting.csv_lines(pairs),
                "rankings": lambda: exporting.jsonl_lines(selectors.ranking_rows(project_id=project.pk)),
            }[options["format"]]()
            count = -1 if options["format"] == "csv" else 0
            with output.open("w", encoding="utf-8", newline="") as handle:
                for line in lines:
                    handle.write(line)
                    count += 1
        self.stdout.write(self.style.SUCCESS(f"wrote {counted(count, 'row')} to {output}"))


def _parquet(project: Project, pairs, output: Path, *, argilla: bool, conversational: bool) -> int:
    from webapp.annotation import argilla_export

    if argilla:
        layout = argilla_export.argilla_layout(project)
        rows, features = argilla_export.argilla_rows(project, layout), argilla_export.argilla_features(layout)
    else:
        rows = exporting.conversational_rows(pairs) if conversational else pairs
        features = exporting.pair_features(conversational=conversational)
    try:
        return exporting.write_parquet(rows, output, features=features)
    except ValueError as error:
        raise CommandError(str(error)) from None

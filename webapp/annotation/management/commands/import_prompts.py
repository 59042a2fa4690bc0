"""manage.py import_prompts FILE --project NAME_OR_ID: all rows or none, with a progress bar.

Read as an import job reads an upload (workers/importing.py): every row checked first, then all written in one
transaction, a line at a time, so a file of any size fits in memory; no upload limit applies here."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import reset_queries
from tqdm import tqdm

from webapp.annotation import services
from webapp.annotation.importing import (
    FORMATS,
    IdRepeatedInFile,
    ImportFileError,
    count_checked_rows,
    format_from_name,
    iter_import,
    naming_first_line,
)
from webapp.annotation.management.commands.export_preferences import project_from_option
from webapp.text import counted


class Command(BaseCommand):
    help = ("Import prompts (JSONL, CSV, Parquet or a zipped datasets directory) into an annotation project; importing "
            "the same file twice adds nothing.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--project", required=True, help="project name or id")
        parser.add_argument("--format", choices=FORMATS, help="default: from the file name")

    def handle(self, *args: object, **options) -> None:
        path: Path = options["file"]
        project = project_from_option(options["project"])
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        try:
            file_format = options["format"] or format_from_name(path.name)
            with path.open("rb") as stream:
                rows = count_checked_rows(stream, file_format=file_format)
            with path.open("rb") as stream, tqdm(total=rows, unit="row", desc=f"import {path.name}",
                                                 file=self.stderr._out) as bar:
                summary = services.prompts_import(project=project, records=iter_import(stream, file_format=file_format),
                                                  progress=lambda written: _advance(bar, written))
        except IdRepeatedInFile as error:
            raise CommandError(f"{path}: nothing imported: {naming_first_line(error, path, file_format=file_format)}") from None
        except ImportFileError as error:
            raise CommandError(f"{path}: nothing imported: {error}") from None
        self.stdout.write(self.style.SUCCESS(
            f"{path}: {counted(summary.created, 'prompt')} imported into '{project.name}' ({summary.contents}); "
            f"{summary.already_present} already present"
        ))


def _advance(bar: tqdm, written: int) -> None:
    bar.update(written)
    # DEBUG keeps the SQL of recent queries, and each batch's INSERT holds its rows' text
    reset_queries()

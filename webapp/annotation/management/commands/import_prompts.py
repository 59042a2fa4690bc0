"""manage.py import_prompts FILE --project NAME_OR_ID: all rows or none, with a progress bar."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from webapp.annotation import services
from webapp.annotation.importing import FORMATS, ImportFileError, format_from_name, parse_import
from webapp.annotation.management.commands.export_preferences import project_from_option
from webapp.text import counted


class Command(BaseCommand):
    help = "Import prompts (JSONL or CSV) into an annotation project; importing the same file twice adds nothing."

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
            records = parse_import(path.read_bytes(), file_format=options["format"] or format_from_name(path.name))
        except ImportFileError as error:
            raise CommandError(f"{path}: nothing imported: {error}") from None
        with tqdm(total=len(records), unit="row", desc=f"import {path.name}", file=self.stderr._out) as bar:
            summary = services.prompts_import(project=project, records=records, progress=bar.update)
        self.stdout.write(self.style.SUCCESS(
            f"{path}: {counted(summary.created, 'prompt')} imported into '{project.name}' ({summary.contents}); "
            f"{summary.already_present} already present"
        ))

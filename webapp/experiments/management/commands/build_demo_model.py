"""Build the tiny arithmetic model (random Llama + tokenizer trained on the task) into a directory.

Run in its own process by the demo seeding, because it loads torch and the web process must not.
"""

from pathlib import Path

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Build the tiny arithmetic demo model into DIRECTORY (save_pretrained layout)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("directory", type=Path)

    def handle(self, *args: object, directory: Path, **options: object) -> None:
        from trainer.builtin_datasets.arithmetic import build_tiny_model

        path = build_tiny_model(directory)
        self.stdout.write(self.style.SUCCESS(f"tiny arithmetic model written to {path}"))

"""Demo accounts (and each app's demo data) for the embedded default: `make run` calls this on every start."""

from importlib import import_module
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from webapp.accounts.roles import ANNOTATOR, RESEARCHER
from webapp.accounts.services import user_create

DEMO_USERS = (("researcher", RESEARCHER), ("annotator", ANNOTATOR))
# Apps contribute demo data with a `demo.seed_demo_data(stdout)` function; it must be idempotent.
DEMO_APPS = ("webapp.annotation", "webapp.experiments")


def demo_accounts_file() -> Path:
    """Where the demo passwords are kept for `serve`'s start-up summary: a local demo's data dir, owner-only."""
    return settings.DATA_DIR / "demo-accounts.txt"


def _remember_demo_password(username: str, password: str) -> None:
    path = demo_accounts_file()
    rows = [row for row in (path.read_text().splitlines() if path.is_file() else [])
            if row.partition("\t")[0] != username]
    path.write_text("".join(f"{row}\n" for row in [*rows, f"{username}\t{password}"]))
    path.chmod(0o600)


class Command(BaseCommand):
    help = "Create the demo researcher and annotator (passwords printed once, on creation) and demo data."

    def handle(self, *args: object, **options: object) -> None:
        for username, role in DEMO_USERS:
            if User.objects.filter(username=username).exists():
                self.stdout.write(f"demo {role} '{username}' exists (its password was printed when it was created)")
                continue
            _, password = user_create(username=username, role=role)
            _remember_demo_password(username, password)
            self.stdout.write(self.style.SUCCESS(f"demo {role}: username '{username}'  password '{password}'"))
        for app in DEMO_APPS:
            try:
                module = import_module(f"{app}.demo")
            except ModuleNotFoundError as error:
                if error.name != f"{app}.demo":
                    raise
                continue
            module.seed_demo_data(self.stdout)

"""Demo accounts (and each app's demo data) for the embedded default: `make run` calls this on every start."""

from importlib import import_module

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from webapp.accounts.roles import ANNOTATOR, RESEARCHER
from webapp.accounts.services import user_create

DEMO_USERS = (("researcher", RESEARCHER), ("annotator", ANNOTATOR))
# Apps contribute demo data with a `demo.seed_demo_data(stdout)` function; it must be idempotent.
DEMO_APPS = ("webapp.annotation", "webapp.experiments")


class Command(BaseCommand):
    help = "Create the demo researcher and annotator (passwords printed once, on creation) and demo data."

    def handle(self, *args: object, **options: object) -> None:
        for username, role in DEMO_USERS:
            if User.objects.filter(username=username).exists():
                self.stdout.write(f"demo {role} '{username}' exists (its password was printed when it was created)")
                continue
            _, password = user_create(username=username, role=role)
            self.stdout.write(self.style.SUCCESS(f"demo {role}: username '{username}'  password '{password}'"))
        for app in DEMO_APPS:
            try:
                module = import_module(f"{app}.demo")
            except ModuleNotFoundError as error:
                if error.name != f"{app}.demo":
                    raise
                continue
            module.seed_demo_data(self.stdout)

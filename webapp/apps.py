from django.apps import AppConfig


class WebappConfig(AppConfig):
    """The project package itself, installed for its management commands (run, seed_demo)."""

    name = "webapp"
    verbose_name = "Preflab"

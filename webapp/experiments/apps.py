from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "webapp.experiments"
    label = "experiments"

    def ready(self) -> None:
        # Registers the periodic reconcile of jobs (stale heartbeats, lost messages) with the Celery app (workers import Django, so
        # every worker and celery beat know the task and its schedule).
        from webapp.experiments import tasks  # noqa: F401

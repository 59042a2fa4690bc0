from django.urls import path

from webapp.experiments import removal_views, views

app_name = "experiments"

urlpatterns = [
    path("runs/", views.run_list, name="runs"),
    path("runs/rows", views.run_list, {"rows_only": True}, name="run_rows"),
    path("runs/new", views.run_launch, name="run_launch"),
    path("runs/compare", views.run_compare, name="run_compare"),
    path("runs/chart-pins", views.chart_pins, name="chart_pins"),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/status", views.run_status, name="run_status"),
    path("runs/<int:run_id>/metrics", views.run_metrics, name="run_metrics"),
    path("runs/<int:run_id>/data.jsonl", views.run_data, name="run_data"),
    path("runs/<int:run_id>/samples", views.run_samples, name="run_samples"),
    path("runs/<int:run_id>/cancel", views.run_cancel, name="run_cancel"),
    path("runs/<int:run_id>/resume", views.run_resume, name="run_resume"),
    path("runs/<int:run_id>/files", removal_views.run_files, name="run_files"),
    path("runs/<int:run_id>/archive", removal_views.run_archive_toggle, name="run_archive"),
    path("runs/<int:run_id>/delete", removal_views.run_delete_confirm, name="run_delete_confirm"),
    path("runs/<int:run_id>/delete/confirmed", removal_views.run_delete_view, name="run_delete"),
    path("runs/<int:run_id>/checkpoints/<int:checkpoint_id>/delete", removal_views.checkpoint_delete_confirm,
         name="checkpoint_delete_confirm"),
    path("runs/<int:run_id>/checkpoints/<int:checkpoint_id>/delete/confirmed", removal_views.checkpoint_delete_view,
         name="checkpoint_delete"),
    path("models/", views.model_list, name="models"),
]

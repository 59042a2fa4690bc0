from django.urls import path

from webapp.annotation import removal_views, views

app_name = "annotation"

urlpatterns = [
    path("annotate/", views.annotate_home, name="annotate_home"),
    path("annotate/<int:project_id>/", views.annotate, name="annotate"),
    path("annotate/items/<int:assignment_id>/submit/", views.annotate_submit, name="annotate_submit"),
    path("annotate/items/<int:assignment_id>/skip/", views.annotate_skip, name="annotate_skip"),
    path("annotate/<int:project_id>/back/", views.annotate_back, name="annotate_back"),
    path("projects/", views.project_list, name="project_list"),
    path("projects/new/", views.project_create, name="project_create"),
    path("projects/<int:project_id>/", views.project_detail, name="project_detail"),
    path("projects/<int:project_id>/edit/", views.project_edit, name="project_edit"),
    path("projects/<int:project_id>/import/", views.project_import, name="project_import"),
    path("imports/<int:job_id>/", views.import_job_status, name="import_job_status"),
    path("projects/<int:project_id>/progress/", views.project_progress, name="project_progress"),
    path("projects/<int:project_id>/data/", views.project_data, name="project_data"),
    path("projects/<int:project_id>/rounds/", views.project_rounds, name="project_rounds"),
    path("projects/<int:project_id>/rounds/score/", views.round_score, name="round_score"),
    path("projects/<int:project_id>/suggestions/", views.suggestion_job_start, name="suggestion_job_start"),
    path("suggestions/<int:job_id>/cancel/", views.suggestion_job_cancel, name="suggestion_job_cancel"),
    path("suggestions/<int:job_id>/resume/", views.suggestion_job_resume, name="suggestion_job_resume"),
    path("projects/<int:project_id>/items/", views.project_items, name="project_items"),
    path("projects/<int:project_id>/files/", removal_views.project_files, name="project_files"),
    path("projects/<int:project_id>/archive/", removal_views.project_archive_toggle, name="project_archive"),
    path("projects/<int:project_id>/delete/", removal_views.project_delete_confirm, name="project_delete_confirm"),
    path("projects/<int:project_id>/delete/confirmed/", removal_views.project_delete_view, name="project_delete"),
    path("projects/<int:project_id>/items/<int:prompt_id>/", views.project_item, name="project_item"),
    path("projects/<int:project_id>/sample/", views.sampling_create, name="sampling_create"),
    path("projects/<int:project_id>/export/<str:kind>/", views.project_export, name="project_export"),
    path("sampling/<int:job_id>/", views.sampling_job_status, name="sampling_job_status"),
    path("sampling/<int:job_id>/cancel/", views.sampling_job_cancel, name="sampling_job_cancel"),
    path("sampling/<int:job_id>/resume/", views.sampling_job_resume, name="sampling_job_resume"),
]

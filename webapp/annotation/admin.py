from django.contrib import admin

from webapp.annotation.models import (
    Assignment,
    PreferencePair,
    Project,
    Prompt,
    Ranking,
    Response,
    SamplingJob,
)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "mode", "responses_per_item", "annotators_per_item", "lease_minutes", "created_at")
    search_fields = ("name",)
    filter_horizontal = ("members",)


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    list_display = ("external_id", "project", "response_count", "ranking_count", "annotatable")
    list_filter = ("project", "annotatable")
    search_fields = ("external_id", "text")


@admin.register(Response)
class ResponseAdmin(admin.ModelAdmin):
    list_display = ("id", "prompt", "source", "created_at")
    list_filter = ("source",)
    raw_id_fields = ("prompt",)


@admin.register(Assignment)
class AssignmentAdmin(admin.ModelAdmin):
    list_display = ("prompt", "annotator", "status", "leased_at", "expires_at")
    list_filter = ("status",)
    raw_id_fields = ("prompt",)


@admin.register(Ranking)
class RankingAdmin(admin.ModelAdmin):
    list_display = ("id", "prompt", "annotator", "all_bad", "skipped", "seconds_spent", "created_at")
    list_filter = ("all_bad", "skipped")
    raw_id_fields = ("prompt", "assignment")


@admin.register(PreferencePair)
class PreferencePairAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "prompt", "ranking", "weight", "margin")
    raw_id_fields = ("prompt", "ranking", "chosen", "rejected")


@admin.register(SamplingJob)
class SamplingJobAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "model_path", "status", "progress_done", "progress_total", "created_at")
    list_filter = ("status",)

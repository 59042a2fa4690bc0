from django.contrib import admin
from django.urls import include, path

from webapp import views
from webapp.api.api import api_urls

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("system/", views.system_status, name="system_status"),
    path("system/worker-ping", views.worker_ping, name="worker_ping"),
    path("accounts/", include("webapp.accounts.urls")),
    path("", include("webapp.annotation.urls")),
    path("", include("webapp.experiments.urls")),
    path("api/v1/", api_urls()),
    path("admin/", admin.site.urls),
]

handler403 = "webapp.views.permission_denied"

from django.contrib.auth import views as auth_views
from django.urls import path

from webapp.accounts import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("tokens/", views.api_tokens, name="api_tokens"),
    path("tokens/new/", views.api_token_create, name="api_token_create"),
    path("tokens/<int:token_id>/revoke/", views.api_token_revoke, name="api_token_revoke"),
    path("projects/<int:project_id>/members/", views.project_members, name="project_members"),
    path("projects/<int:project_id>/members/new/", views.project_annotator_create, name="project_annotator_create"),
    path("projects/<int:project_id>/members/add/", views.project_member_add, name="project_member_add"),
    path("projects/<int:project_id>/members/<int:user_id>/remove/", views.project_member_remove,
         name="project_member_remove"),
    path("projects/<int:project_id>/members/<int:user_id>/password/", views.project_member_password_reset,
         name="project_member_password_reset"),
]

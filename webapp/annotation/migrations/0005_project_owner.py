"""Projects get an owner, and researchers reach only the projects they own or were added to (before, every
researcher reached every project). So that nothing becomes unreachable, every researcher is added as a member of
every project that exists now; an admin then takes each researcher out of the projects not theirs (the project's
Members page, or the Django admin). The owner of a project made before this migration is not known (its creator
was not recorded) and stays empty: its researcher members and the admins reach it."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def every_researcher_keeps_every_project(apps, schema_editor):
    project_model = apps.get_model("annotation", "Project")
    user_model = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    membership = project_model.members.through
    researchers = list(user_model.objects.filter(groups__name="researcher").values_list("pk", flat=True))
    present = set(membership.objects.values_list("project_id", "user_id"))
    membership.objects.bulk_create([
        membership(project_id=project_id, user_id=user_id)
        for project_id in project_model.objects.values_list("pk", flat=True) for user_id in researchers
        if (project_id, user_id) not in present
    ])


class Migration(migrations.Migration):

    dependencies = [
        ('annotation', '0004_response_source_api'),
        ('accounts', '0001_roles'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='project',
            name='owner',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='owned_projects', to=settings.AUTH_USER_MODEL),
        ),
        # going back keeps the memberships: they reach no further than every researcher did before
        migrations.RunPython(every_researcher_keeps_every_project, migrations.RunPython.noop),
    ]

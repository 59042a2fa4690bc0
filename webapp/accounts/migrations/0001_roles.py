from django.db import migrations

ROLES = ("annotator", "researcher")


def create_role_groups(apps, schema_editor):
    group_model = apps.get_model("auth", "Group")
    for role in ROLES:
        group_model.objects.get_or_create(name=role)


class Migration(migrations.Migration):
    dependencies = [("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(create_role_groups, migrations.RunPython.noop)]

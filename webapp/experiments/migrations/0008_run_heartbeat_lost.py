from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0007_run_data_snapshot"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="heartbeat_lost",
            field=models.BooleanField(default=False),
        ),
    ]

"""The migration to project owners (annotation 0005) keeps every project reachable by every researcher who reached it
before (all of them: researchers saw every project), changes nothing for annotators, and records no owner it does
not know."""

import pytest

from tests.webapp.migrating import latest_migrations_after, migrate_to, migrate_to_latest  # noqa: F401 (the fixture)
from webapp.accounts.roles import is_researcher
from webapp.annotation.selectors import projects_visible_to

BEFORE = [("annotation", "0004_response_source_api")]
AFTER = [("annotation", "0005_project_owner")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("latest_migrations_after")
def test_after_the_migration_every_researcher_still_reaches_every_project_and_annotators_only_theirs():
    old = migrate_to(BEFORE)
    user_model, group_model = old.get_model("auth", "User"), old.get_model("auth", "Group")
    project_model = old.get_model("annotation", "Project")
    researcher_group, _ = group_model.objects.get_or_create(name="researcher")
    annotator_group, _ = group_model.objects.get_or_create(name="annotator")
    researchers = [user_model.objects.create(username=f"researcher{index}") for index in range(3)]
    for user in researchers:
        user.groups.add(researcher_group)
    annotator = user_model.objects.create(username="annotator")
    annotator.groups.add(annotator_group)
    projects = [project_model.objects.create(name=f"project {index}") for index in range(4)]
    projects[0].members.add(annotator, researchers[0])  # a researcher already a member stays one, once

    migrate_to(AFTER)
    migrate_to_latest()  # the current models below read columns later migrations added
    from django.contrib.auth.models import User

    from webapp.annotation.models import Project

    for user in User.objects.filter(username__startswith="researcher"):
        assert is_researcher(user)
        assert set(projects_visible_to(user)) == set(Project.objects.all()), user.username
    annotator = User.objects.get(username="annotator")
    assert list(projects_visible_to(annotator)) == [Project.objects.get(name="project 0")]
    assert not Project.objects.filter(owner__isnull=False).exists()  # the creator was never recorded
    assert Project.objects.get(name="project 0").members.count() == 4

"""The one list of annotation modes: how a submission becomes tiers (ranking, pairwise) or labels on the responses
(thumbs, ratings), what the annotate page shows, what the API accepts; Project.mode's choices are built from it.

Adding a mode: its module here (an AnnotationMode, see base.py), its template
templates/annotation/modes/<name>.html (the partials AnnotationMode.template names), its script
static/annotation/modes/<name>.js, one entry in MODES below, and the migration `manage.py makemigrations
annotation` then writes for Project.mode's choices.
"""

from webapp.annotation.modes import pairwise, ranking, ratings, thumbs
from webapp.annotation.modes.base import AnnotationMode

MODES: dict[str, AnnotationMode] = {mode.name: mode for mode in (ranking.MODE, pairwise.MODE, thumbs.MODE, ratings.MODE)}
DEFAULT_MODE = ranking.MODE.name


def annotation_mode(name: str) -> AnnotationMode:
    """The registered mode called `name`; KeyError otherwise (Project.mode's choices hold only these)."""
    return MODES[name]

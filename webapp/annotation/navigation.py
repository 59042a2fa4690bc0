from webapp.accounts.roles import ANNOTATOR, RESEARCHER
from webapp.navigation import NavItem

NAV_ITEMS = [
    NavItem("Annotate", "annotation:annotate_home", ANNOTATOR, "Rank responses, item after item, by keyboard or mouse."),
    NavItem("Projects", "annotation:project_list", RESEARCHER,
            "Annotation projects: import prompts, sample responses, watch agreement, export preference pairs."),
]

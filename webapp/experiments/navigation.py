from webapp.accounts.roles import RESEARCHER
from webapp.navigation import NavItem

NAV_ITEMS = [
    NavItem("Runs", "experiments:runs", RESEARCHER, "Launch, watch, cancel, resume and compare training runs."),
    NavItem("Models", "experiments:models", RESEARCHER, "Base models and every checkpoint a run wrote."),
]

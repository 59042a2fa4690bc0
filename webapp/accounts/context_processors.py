from django.http import HttpRequest

from webapp.accounts.roles import is_annotator, is_researcher


def roles(request: HttpRequest) -> dict[str, bool]:
    user = getattr(request, "user", None)
    if user is None:
        return {"is_researcher": False, "is_annotator": False}
    return {"is_researcher": is_researcher(user), "is_annotator": is_annotator(user)}

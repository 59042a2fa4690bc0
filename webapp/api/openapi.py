"""The OpenAPI schema says what the API does: besides each operation's own answers, the refusals every operation
of its kind may give, from the layers they all share (the token, the roles, the parser, the text rule), and the
text rule itself: no string holds a NUL character.

tests/webapp/api/test_schema_fuzz.py holds the API to it: every status code and content type an answer has is one
its operation declares.
"""

from __future__ import annotations

from typing import Any

from webapp.api.schemas import STORABLE_TEXT_PATTERN, Detail

DETAIL = {"application/json": {"schema": {"$ref": "#/components/schemas/Detail"}}}

# Every operation: the token (webapp.api.auth), the roles, and the server in front of Django.
EVERY_OPERATION = {
    "401": "No token, or one that is unknown or revoked, or an inactive user's (`Authorization: Bearer pfl_…`).",
    "403": "The token's user is not a researcher.",
    "414": "The address is longer than the server takes (gunicorn reads a request line of at most 4,094 bytes).",
}
WITH_PARAMETERS = {
    "422": "A parameter or the body is refused; the detail names the field: a value of the wrong type or out of "
           "its bounds, or text holding a NUL character or a lone UTF-16 surrogate (refused anywhere, as the "
           "import refuses them).",
}
WITH_PATH_PARAMETERS = {"404": "What the path names does not exist."}
WITH_BODY = {
    "400": "The body is not JSON.",
    "411": "The body was sent without its length (Transfer-Encoding: chunked): send a Content-Length.",
    "413": "The body is larger than the server takes (PREFLAB_UPLOAD_MAX_BYTES).",
}
# Answered before the API's code runs, not in its format: an address too long by gunicorn (an HTML page), a body
# too large by Django's middleware (webapp.uploads: in plain text).
CONTENT = {
    "414": {"text/html": {"schema": {"type": "string"}}},
    "413": {**DETAIL, "text/plain": {"schema": {"type": "string"}}},
}


def declared_as_it_answers(schema: dict[str, Any]) -> dict[str, Any]:
    """ninja's `schema` with the common refusals and the text rule declared."""
    _declare_the_text_rule(schema)
    return declare_common_refusals(schema)


def _declare_the_text_rule(node: Any) -> None:
    """Every string the schema describes, unless it says more already (an enum, a pattern, a format), holds no
    NUL: the API refuses one anywhere (webapp.api.api.storable_input), and stores none."""
    if isinstance(node, dict):
        if node.get("type") == "string" and not {"enum", "const", "pattern", "format"} & node.keys():
            node["pattern"] = STORABLE_TEXT_PATTERN
        for value in node.values():
            _declare_the_text_rule(value)
    elif isinstance(node, list):
        for value in node:
            _declare_the_text_rule(value)


def declare_common_refusals(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (ninja's, as a dict) with the refusals above added to each operation that does not declare them
    itself, and the Detail body they answer with."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("Detail", Detail.model_json_schema())
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            parameters = operation.get("parameters", [])
            refusals = dict(EVERY_OPERATION)
            if parameters or "requestBody" in operation:
                refusals |= WITH_PARAMETERS
            if any(parameter.get("in") == "path" for parameter in parameters):
                refusals |= WITH_PATH_PARAMETERS
            if "requestBody" in operation:
                refusals |= WITH_BODY
            declared = {str(status) for status in responses}  # ninja's keys are ints
            for status, description in refusals.items():
                if status not in declared:
                    responses[int(status)] = _refusal(status, description)
    return schema


def _refusal(status: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": CONTENT.get(status, DETAIL)}

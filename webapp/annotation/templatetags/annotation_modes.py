"""Template filters of the annotate page's mode partials."""

from collections.abc import Mapping

from django import template

register = template.Library()


@register.filter
def entry(values: object, key: str) -> object:
    """`values[key]`, or "" when `values` is no mapping or lacks it: a response's entered rating on one aspect."""
    return values.get(key, "") if isinstance(values, Mapping) else ""

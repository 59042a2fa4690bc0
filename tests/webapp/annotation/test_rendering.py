"""Markdown that would hide part of a text is shown as written: an annotator never ranks text they cannot see."""

import re

import pytest

from webapp.annotation.rendering import AS_WRITTEN_NOTE, render_markdown


def _visible_words(rendered: str) -> set[str]:
    return set(re.findall(r"[^\W\d_]+", re.sub(r"<[^>]*>", " ", rendered)))


@pytest.mark.parametrize(
    "text",
    [
        "> " * 25 + "deepest words here\n\nafter the quotes",
        "".join("  " * level + f"- item{'x' * level}\n" for level in range(12)) + "\nafter the list",
    ],
    ids=["25 nested quotes", "12 nested list levels"],
)
def test_text_nested_deeper_than_markdown_draws_is_shown_as_written(text):
    rendered = render_markdown(text)
    assert AS_WRITTEN_NOTE in rendered
    assert set(re.findall(r"[^\W\d_]+", text)) <= _visible_words(rendered)


def test_ordinary_markdown_is_rendered_and_untrusted_html_stays_text():
    rendered = render_markdown("**bold** [link](https://example.com/) `code` <script>alert(1)</script>\n\n"
                               "> a quote\n\n1. one\n2. two\n\n| a | b |\n|---|---|\n| c | d |")
    assert AS_WRITTEN_NOTE not in rendered
    assert "<strong>bold</strong>" in rendered and "<blockquote>" in rendered and "<table>" in rendered
    assert "<script>" not in rendered and "&lt;script&gt;" in rendered


def test_text_shown_as_written_is_escaped():
    rendered = render_markdown("> " * 25 + "<img src=x onerror=alert(1)>")
    assert "<img" not in rendered and "&lt;img src=x onerror=alert(1)&gt;" in rendered

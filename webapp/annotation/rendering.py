"""Markdown for guidelines and responses: markdown-it with raw HTML off, then nh3 as a second, strict gate.

Model output and imported text are untrusted: `<script>` or `<img onerror>` in a response must show as text.
With html disabled markdown-it escapes raw tags itself; nh3 removes anything that would still slip through
(javascript: links, unexpected attributes) from the markdown it generates.
"""

import html
import re

import nh3
from markdown_it import MarkdownIt

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable("table")
_ALLOWED_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre", "blockquote",
    "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
}
# No <img>: a remote image in a response would make the annotator's browser call an outside server.
_ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "ol": {"start"}}


_WORD = re.compile(r"[^\W\d_]+")
_TAG = re.compile(r"<[^>]*>")
_ATTRIBUTE_VALUE = re.compile(r'="([^"]*)"')
AS_WRITTEN_NOTE = (
    "Shown as written: as Markdown, part of this text would not show (quotes or lists nested more than "
    "20 levels deep, for example)."
)


def render_markdown(text: str) -> str:
    """Sanitised HTML for `text`; code blocks keep their language class. Text that Markdown would partly drop
    (markdown-it stops at 20 nested blocks and skips what lies deeper) is shown as written instead, so nobody
    judges text they cannot see."""
    text = text or ""
    rendered = _MARKDOWN.render(text)
    if _words(html.unescape(text)) - _rendered_words(rendered):
        return f'<p class="as-written-note">{AS_WRITTEN_NOTE}</p><pre class="as-written">{html.escape(text)}</pre>'
    return nh3.clean(
        rendered,
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text))


def _rendered_words(rendered: str) -> set[str]:
    """The words of the HTML as shown, and of its attributes (a link's address, an image's alt text)."""
    shown = html.unescape(_TAG.sub(" ", rendered))
    attributes = html.unescape(" ".join(_ATTRIBUTE_VALUE.findall(rendered)))
    return _words(shown) | _words(attributes)

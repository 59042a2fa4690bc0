"""Markdown for guidelines and responses: markdown-it with raw HTML off, then nh3 as a second, strict gate.

Model output and imported text are untrusted: `<script>` or `<img onerror>` in a response must show as text.
With html disabled markdown-it escapes raw tags itself; nh3 removes anything that would still slip through
(javascript: links, unexpected attributes) from the markdown it generates.
"""

import nh3
from markdown_it import MarkdownIt

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable("table")
_ALLOWED_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre", "blockquote",
    "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
}
# No <img>: a remote image in a response would make the annotator's browser call an outside server.
_ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "ol": {"start"}}


def render_markdown(text: str) -> str:
    """Sanitised HTML for `text`; code blocks keep their language class."""
    html = _MARKDOWN.render(text or "")
    return nh3.clean(
        html,
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )

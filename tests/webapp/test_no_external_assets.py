"""No page loads anything from outside the server: GPU clusters are often offline, and CDNs leak usage."""

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXTERNAL_REFERENCE = re.compile(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import\s+["']?(?:https?:)?//""", re.IGNORECASE)
ATTRIBUTE_URL = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)


VENDORED = REPO_ROOT / "static" / "vendor"


def _our_front_end_files() -> list[Path]:
    """Our templates and static files; third-party files vendored unchanged under static/vendor/ are left out
    (plotly.js holds its logo's link to plotly.com, shown only with displaylogo, which charts.js turns off)."""
    roots = [REPO_ROOT / "templates", REPO_ROOT / "static", *(REPO_ROOT / "webapp").glob("*/templates")]
    return [path for root in roots if root.exists() for path in root.rglob("*")
            if path.suffix in {".html", ".css", ".js", ".svg"} and VENDORED not in path.parents]


def test_templates_and_static_files_reference_nothing_external():
    files = _our_front_end_files()
    assert any(path.name == "base.html" for path in files)
    offenders = [f"{path.relative_to(REPO_ROOT)}: {match.group(0)}"
                 for path in files for match in EXTERNAL_REFERENCE.finditer(path.read_text(errors="replace"))]
    assert offenders == []


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/accounts/login/", "/", "/system/"])
def test_rendered_pages_load_only_from_this_server(researcher_client, url):
    page = researcher_client.get(url).content.decode()
    urls = ATTRIBUTE_URL.findall(page)
    assert any(u.endswith("htmx-2.min.js") for u in urls) or url != "/"
    for found in urls:
        assert not re.match(r"^(?:[a-z]+:)?//", found, re.IGNORECASE), found


@pytest.mark.django_db
def test_htmx_and_plotly_are_served_by_us(researcher_client):
    from django.contrib.staticfiles import finders

    assert finders.find("django_htmx/htmx-2.min.js")
    assert finders.find("vendor/plotly/plotly-basic-4.1.1.min.js")


def test_the_vendored_plotly_bundle_keeps_its_version_and_licence_header():
    bundle = VENDORED / "plotly" / "plotly-basic-4.1.1.min.js"
    header = bundle.read_text()[:200]
    assert "plotly.js (basic - minified) v4.1.1" in header and "Licensed under the MIT license" in header
    assert (VENDORED / "plotly" / "LICENSE").read_text().startswith("MIT License")


def test_vendored_files_name_no_cdn():
    """Vendored files may keep their authors' links (licences, docs), but nothing a page would fetch from a CDN."""
    cdn = re.compile(r"https?://(?:cdn|unpkg|cdnjs|ajax\.googleapis)[\w.-]*/", re.IGNORECASE)
    found = [f"{path.relative_to(REPO_ROOT)}: {match.group(0)}" for path in VENDORED.rglob("*.js")
             for match in cdn.finditer(path.read_text(errors="replace"))]
    assert not found, found


def test_htmx_requests_carry_the_csrf_token():
    base = (REPO_ROOT / "templates" / "base.html").read_text()
    assert """hx-headers='{"X-CSRFToken": "{{ csrf_token }}"}'""" in base

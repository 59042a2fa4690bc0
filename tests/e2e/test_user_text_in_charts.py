"""Names and texts a program logs are shown as text, never drawn as HTML: metric names, sample reward names, run
names, prompts and completions holding markup or `javascript:`, logged by a script through the Python client, make
no link, no bold, no image and no style anywhere on the run page, the compare page and the samples view (plotly's
SVG included), show as typed, and cause no violation of the Content-Security-Policy and no console error.

Before, a metric named <a href=...> was a link in its chart's title and <b> made two CSP violations (plotly draws
its own HTML subset in titles and hover labels, with inline styles)."""

import pytest
from preflab_client import Client

from tests.e2e.conftest import assert_no_problem, log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LINK = '<a href="https://evil.example/login">Session expired - click to log in</a>'
HOSTILE = [LINK, "<b>bold</b>", "javascript:alert(1)", "<img src=x onerror=alert(1)>",
           '<span style="color:red">red</span>', "%{x} &amp; %{meta}"]
RUN_NAMES = ["<b>first</b> <img src=x onerror=alert(1)>", '<a href="javascript:alert(1)">second</a>']

# What the markup above would make if it were drawn: an element from it, a link or source anywhere (an SVG <a> has
# xlink:href), a style plotly sets for <b> or <span style>, or an inline handler.
MADE_FROM_TEXT = """() => {
  const found = [];
  for (const element of document.querySelectorAll("*")) {
    const tag = element.localName;
    if (tag === "b" || tag === "img") found.push(`<${tag}>`);
    for (const attribute of element.attributes) {
      const value = attribute.value;
      if (/^(href|xlink:href|src|action|formaction)$/.test(attribute.name)
          && (value.includes("evil.example") || /^\\s*javascript:/i.test(value) || value === "x")) {
        found.push(`${tag} ${attribute.name}=${value}`);
      }
      if (attribute.name.startsWith("on")) found.push(`${tag} ${attribute.name}`);
      if (tag === "tspan" && attribute.name === "style" && /font-weight|color/.test(value)) {
        found.push(`tspan style=${value}`);
      }
    }
  }
  return found;
}"""


@pytest.fixture
def api_token(researcher) -> str:
    from webapp.accounts.services import api_token_create

    return api_token_create(user=researcher, name="browser test")[1]


def _logged_runs(live_server, api_token: str, outbox) -> list[int]:
    ids = []
    with Client(live_server.url, api_token, outbox_dir=outbox) as preflab:
        for offset, name in enumerate(RUN_NAMES):
            run = preflab.init_run(name, config={LINK: offset, "lr": 0.001})
            for step in range(1, 6):
                metrics = {"loss": 1.0 / step + offset, **{text: step * (index + 1) for index, text in enumerate(HOSTILE)}}
                if step == 3:
                    metrics["<b>bold</b>"] = float("nan")  # a non-finite marker, whose hover label names its metric
                run.log(metrics, step=step)
            run.log_samples([{"prompt": text, "completion": f"{text} (completion)",
                              "rewards": {reward: 0.5 for reward in HOSTILE}} for text in HOSTILE], step=5)
            assert run.finish()["status"] == "succeeded"
            ids.append(run.id)
    return ids


def _chart_texts(page, selector: str) -> list[str]:
    return page.locator(f".chart {selector}").all_text_contents()


def test_logged_names_and_texts_show_as_typed_and_make_no_element(watched_page, live_server, api_token, tmp_path):
    page = watched_page
    first, second = _logged_runs(live_server, api_token, tmp_path / "outbox")
    log_in(page, live_server, "rita", "rita-password-1")

    page.goto(f"{live_server.url}/runs/{first}/")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    assert sorted(page.evaluate("window.preflabCharts.metrics()")) == sorted(["loss", *HOSTILE])
    assert sorted(_chart_texts(page, ".gtitle")) == sorted(["loss", *HOSTILE])
    # the NaN's marker: its hover label names the metric as typed
    page.evaluate("""Plotly.Fx.hover(document.querySelector('.chart[data-metric="<b>bold</b>"]'),
                                     [{curveNumber: 2, pointNumber: 0}])""")
    assert _chart_texts(page, ".hoverlayer .hovertext") == ["<b>bold</b> = NaN at 3"]
    samples = page.locator("#samples-body").inner_text()
    for text in HOSTILE:
        assert f"{text} (completion)" in samples and text in samples
    assert page.evaluate(MADE_FROM_TEXT) == []
    assert_no_problem(page)

    page.goto(f"{live_server.url}/runs/compare?runs={first}&runs={second}")
    page.wait_for_function("window.preflabCharts && window.preflabCharts.drawn()")
    legend = page.locator('.chart[data-metric="loss"] .legendtext').all_text_contents()
    assert legend == [f"#{first} {RUN_NAMES[0]}", f"#{second} {RUN_NAMES[1]}"]
    assert sorted(_chart_texts(page, ".gtitle")) == sorted(["loss", *HOSTILE])
    assert LINK in page.locator(".config-diff").inner_text()
    assert page.evaluate(MADE_FROM_TEXT) == []
    assert_no_problem(page)

    page.goto(f"{live_server.url}/runs/")
    assert RUN_NAMES[1] in page.locator("#run-rows").inner_text()
    assert page.evaluate(MADE_FROM_TEXT) == []
    assert_no_problem(page)

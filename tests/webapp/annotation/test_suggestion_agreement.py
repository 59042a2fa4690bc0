"""Suggestions measured against the annotators (issue 32, point 2): per suggestion source, over the items both
answered, accuracy on the people's strict preferences with its Wilson interval, the pairs it tied, Kendall's tau-b
averaged over the answers; answers that accepted a suggestion, skips and held-back answers left out; per round; the
rounds card's reward-model agreement read from any mode's answers; the project page's card and the API."""

import math

import pytest

from tests.webapp.annotation.factories import add_round, make_annotators, make_project, rank_as_told
from tests.webapp.annotation.test_rounds import _new_one, _pairwise_project, _rank_all
from tests.webapp.annotation.test_rounds_of_labels import _label_all
from tests.webapp.annotation.test_rounds_of_labels import _project as _labels_project
from webapp.annotation import selectors, suggestion_agreement
from webapp.annotation.models import (
    Project,
    Prompt,
    Ranking,
    Response,
    ResponseLabel,
    RewardScore,
    RoundScoring,
    Suggestion,
    SuggestionJob,
)

pytestmark = pytest.mark.django_db

# Who answered what (response texts, best tier first; None: skipped). ann2's answer to Question 0? accepts the
# reward model's suggestion and her answer to Question 2? is held back: both are left out.
ANSWERS = {
    "ann0": {"Question 0?": [["a"], ["b"], ["c"]], "Question 1?": [["d"], ["e", "f"]],
             "Question 2?": [["g"], ["h"], ["i"]]},
    "ann1": {"Question 0?": [["b"], ["a"], ["c"]], "Question 1?": [["e"], ["d"], ["f"]], "Question 2?": None},
    "ann2": {"Question 0?": [["a"], ["b"], ["c"]], "Question 1?": None, "Question 2?": [["i"], ["h"], ["g"]]},
}
RM = "reward model run #7"
JUDGE = "judge SmolLM2-135M-Instruct"
SUGGESTED = {
    RM: {"Question 0?": [["a"], ["b"], ["c"]], "Question 1?": [["d", "e"], ["f"]], "Question 2?": [["g"], ["h"], ["i"]]},
    # a judge whose two orders never agree: every suggestion a tie
    JUDGE: {"Question 0?": [["a", "b", "c"]], "Question 1?": [["d", "e", "f"]]},
}


def make_measured_project(owner=None) -> Project:
    """Three items of three responses answered by three annotators (ANSWERS), suggested by two sources
    (SUGGESTED, the judge's through a job with its comparisons), and an imported suggestion whose value is no
    ranking (not measured)."""
    annotators = make_annotators(3)
    project = make_project(items=3, overlap=3, texts=[["a", "b", "c"], ["d", "e", "f"], ["g", "h", "i"]],
                           members=annotators, owner=owner, name="Measured")
    ids = dict(Response.objects.filter(prompt__project=project).values_list("text", "pk"))
    prompts = {prompt.text: prompt for prompt in Prompt.objects.filter(project=project)}
    job = SuggestionJob.objects.create(project=project, source=SuggestionJob.Source.JUDGE, model_path="judge",
                                       agent=JUDGE, status=SuggestionJob.Status.SUCCEEDED, judge_comparisons=6,
                                       judge_order_decided=6)
    suggestions = {}
    for agent, by_prompt in SUGGESTED.items():
        for text, tiers in by_prompt.items():
            suggestions[(agent, text)] = Suggestion.objects.create(
                project=project, prompt=prompts[text], question="ranking", agent=agent, score=0.5,
                job=job if agent == JUDGE else None, value=[[ids[response] for response in tier] for tier in tiers])
    Suggestion.objects.create(project=project, prompt=prompts["Question 0?"], question="ranking", agent="file",
                              value="a > b > c")
    rank_as_told(project, annotators, ANSWERS)
    answers = Ranking.objects.filter(annotator__username="ann2")
    answers.filter(prompt__text="Question 0?").update(suggestion=suggestions[(RM, "Question 0?")])
    answers.filter(prompt__text="Question 2?").update(held_back=True)
    return project


def test_each_source_is_measured_over_the_answers_it_can_be_measured_against():
    """By hand, pair by pair (human strict pairs; the suggestion agrees, ties (=) or not):

    reward model
      Q0 ann0 a>b>c : ab ac bc all agree                       3 of 3, tau-b 1
      Q0 ann1 b>a>c : ab not, ac bc agree                       2 of 3, tau-b (2-1)/3 = 1/3
      Q0 ann2       : accepted the suggestion, left out (1)
      Q1 ann0 d>e=f : de (=), df agrees (ef no human pair)      1 of 2, 1 tied, tau-b 1/sqrt(2*2) = 1/2
      Q1 ann1 e>d>f : de (=), df ef agree                       2 of 3, 1 tied, tau-b 2/sqrt(2*3)
      Q2 ann0 g>h>i : all agree                                 3 of 3, tau-b 1
      Q2 ann2       : held back, left out (not counted as accepted); ann1 and ann2 skipped the others
      -> 3 items, 5 answers, 11 of 14 pairs = 78.6 %, 2 tied; Wilson 95 %: 52.4-92.4 %;
         tau-b mean (1 + 1/3 + 1/2 + 0.8165 + 1) / 5 = 0.72997
    judge (every suggestion one tier): Q0 ann0, ann1 and Q1 ann0, ann1: 3 + 3 + 2 + 3 = 11 pairs, all tied:
      accuracy 0 of 11, Wilson 0-25.9 %, tau-b undefined for each answer (None); position bias 6 of 6 = 100 %.
    The file's suggestion ("a > b > c") is no tiers of response ids: that source is not measured.
    """
    project = make_measured_project()
    sources = {source.agent: source for source in selectors.suggestion_agreements(project)}
    assert list(sources) == sorted([RM, JUDGE])

    rm = sources[RM].agreement
    assert (sources[RM].suggested_items, rm.items, rm.answers, rm.left_out) == (3, 3, 5, 1)
    assert (rm.agreed, rm.pairs, rm.tied) == (11, 14, 2)
    assert rm.accuracy == pytest.approx(11 / 14)
    assert (rm.low, rm.high) == pytest.approx((0.524108, 0.924286), abs=1e-6)
    assert rm.tau == pytest.approx((1 + 1 / 3 + 1 / 2 + 2 / math.sqrt(6) + 1) / 5) and rm.tau_answers == 5
    assert rm.text == "79 % (52–92 %) of 14 pairs"
    assert sources[RM].position_bias is None

    judge = sources[JUDGE].agreement
    assert (judge.items, judge.answers, judge.left_out, judge.agreed, judge.pairs, judge.tied) == (2, 4, 1, 0, 11, 11)
    assert (judge.low, judge.high) == pytest.approx((0.0, 0.258833), abs=1e-6)
    assert judge.tau is None and judge.tau_answers == 0
    assert sources[JUDGE].position_bias == 1.0


def test_the_project_page_shows_each_sources_figures(researcher, researcher_client):
    project = make_measured_project(owner=researcher)
    page = researcher_client.get(f"/projects/{project.pk}/").content.decode()
    card = page[page.index('id="suggestion-agreement"'):]
    card = card[:card.index("</section>")]
    rm_row = card[card.index(f'data-agent="{RM}"'):]
    rm_row = rm_row[:rm_row.index("</tr>")]
    assert "79 % (52–92 %) of 14 pairs" in rm_row and "(11 of 14)" in rm_row
    assert '<td class="tied">2</td>' in rm_row and "0.730" in rm_row and "over 5 answers" in rm_row
    assert "1 left out: accepted a suggestion" in rm_row and "3 <span" in rm_row
    judge_row = card[card.index(f'data-agent="{JUDGE}"'):]
    judge_row = judge_row[:judge_row.index("</tr>")]
    assert "position bias 100 % (6 of 6 comparisons decided by the order)" in judge_row
    assert "0 % (0–26 %) of 11 pairs" in judge_row and '<td class="tied">11</td>' in judge_row
    assert 'data-agent="file"' not in card
    # the card alone, as it refreshes
    fragment = researcher_client.get(f"/projects/{project.pk}/suggestion-agreement/").content.decode()
    assert "79 % (52–92 %) of 14 pairs" in fragment and "position bias 100 %" in fragment


def _suggest_ranking(project: Project, agent: str, prefer) -> None:
    """A ranking suggestion on every item of the project: `prefer(responses)` the best one, None for a tie."""
    for prompt in Prompt.objects.filter(project=project):
        responses = list(prompt.responses.order_by("id"))
        best = prefer(responses)
        tiers = [[r.pk for r in responses]] if best is None else [[best.pk], [r.pk for r in responses if r != best]]
        Suggestion.objects.create(project=project, prompt=prompt, question="ranking", value=tiers, agent=agent)


def make_two_measured_rounds(owner) -> Project:
    """Two rounds of a pairwise project ranked by one annotator and suggested on by RM (as the next test says)."""
    project = _pairwise_project(owner=owner)
    (annotator,) = make_annotators(1)
    project.members.add(annotator)
    add_round(project, "base", {"p0": ["b0", "b1"], "p1": ["b2", "b3"]})
    assert _rank_all(project, annotator, lambda shown: next(r for r in shown if r.text in ("b1", "b2"))) == 2
    add_round(project, "dpo", {"p0": ["d0", "d1"], "p1": ["d2", "d3"]})
    assert _rank_all(project, annotator, _new_one) == 4
    _suggest_ranking(project, RM, lambda responses: (
        None if any(r.text == "d3" for r in responses)
        else next((r for r in responses if r.text in ("b0", "b3")), None) or _new_one(responses)))
    return project


def test_each_round_measures_a_source_on_its_own_items(researcher, researcher_client):
    """Round 1 (p0, p1): the annotator prefers b1 and b2, the suggestion b0 and b3: 0 of 2 pairs, tau-b -1 each.
    Round 2 (four items, a copy beside a new response): the annotator prefers the new one everywhere; the
    suggestion too, but ties d3's item: 3 of 4 pairs, 1 tied, tau-b 1 over 3 answers (the tie's is undefined).
    The project: 3 of 6, 1 tied, tau-b (-1 - 1 + 1 + 1 + 1) / 5 = 0.2."""
    project = make_two_measured_rounds(researcher)
    (rm,) = selectors.suggestion_agreements(project)
    assert (rm.agreement.agreed, rm.agreement.pairs, rm.agreement.tied) == (3, 6, 1)
    assert rm.agreement.tau == pytest.approx(0.2) and rm.agreement.tau_answers == 5
    by_round = selectors.round_suggestion_agreements(project)
    (first,), (second,) = by_round[1], by_round[2]
    assert (first.agreement.items, first.agreement.agreed, first.agreement.pairs, first.agreement.tau) == (2, 0, 2, -1)
    assert (second.agreement.items, second.agreement.agreed, second.agreement.pairs, second.agreement.tied) == (
        4, 3, 4, 1)
    assert second.agreement.tau == 1 and second.agreement.tau_answers == 3
    rows = {row.round.number: row for row in selectors.round_rows(project)}
    assert [source.agreement for source in rows[2].suggestions] == [second.agreement]

    card = researcher_client.get(f"/projects/{project.pk}/rounds/").content.decode()
    round_two = card[card.index('id="round-2"'):]
    round_two = round_two[:round_two.index("</tr>")]
    assert "75 % (30–95 %) of 4 pairs" in round_two and "(3 of 4, 1 tied)" in round_two
    assert '<span class="round-suggestion-tau">1.000</span>' in round_two


@pytest.mark.parametrize(("mode", "labels", "suggested", "agreed", "tau"), [
    # p0: the annotator's thumbs b1 up, b0 down; p1: b2 up, b3 down (its answer accepts a suggestion)
    ("thumbs", {"b0": 0, "b1": 1, "b2": 1, "b3": 0}, {"b0": 0, "b1": 1, "b2": 1, "b3": 0}, 1, 1.0),
    # p0: rated b1 5 over b0 2; the suggested ratings put b0 first
    ("ratings", {"b0": 2, "b1": 5, "b2": 4, "b3": 1}, {"b0": 4, "b1": 2, "b2": 5, "b3": 1}, 0, -1.0),
])
def test_thumbs_and_ratings_suggestions_are_measured_per_response(mode, labels, suggested, agreed, tau):
    """Per-response suggestions (a thumb 1/0, a rating on the project's aspect) are read as tiers by value, as the
    annotator's labels are; p1's answer took one label from a suggestion: the whole answer is left out."""
    project = _labels_project(mode)
    (annotator,) = make_annotators(1)
    project.members.add(annotator)
    add_round(project, "base", {"p0": ["b0", "b1"], "p1": ["b2", "b3"]})
    assert _label_all(project, annotator, lambda response: labels[response.text]) == 2
    question = "thumb" if mode == "thumbs" else project.aspects[0]["name"]
    made = {response.text: Suggestion.objects.create(project=project, prompt=response.prompt, response=response,
                                                      question=question, value=suggested[response.text], agent=RM)
            for response in Response.objects.filter(prompt__project=project)}
    ResponseLabel.objects.filter(response__text="b2", ranking__isnull=False).update(suggestion=made["b2"])

    (rm,) = selectors.suggestion_agreements(project)
    assert (rm.suggested_items, rm.agreement.items, rm.agreement.answers, rm.agreement.left_out) == (2, 1, 1, 1)
    assert (rm.agreement.agreed, rm.agreement.pairs, rm.agreement.tied, rm.agreement.tau) == (agreed, 1, 0, tau)


@pytest.mark.parametrize(("mode", "labels", "scores"), [
    # p0: b1 up over b0, scored 0.9 over 0.1 (agrees); p1: b2 up over b3, scored equal (tied: not agreeing)
    ("thumbs", {"b0": 0, "b1": 1, "b2": 1, "b3": 0}, {"b0": 0.1, "b1": 0.9, "b2": 0.2, "b3": 0.2}),
    # p0: b1 rated over b0, scored under it (disagrees); p1: b2 over b3, scored over it (agrees)
    ("ratings", {"b0": 2, "b1": 5, "b2": 4, "b3": 1}, {"b0": 1.0, "b1": 0.0, "b2": 3.0, "b3": -1.0}),
])
def test_the_rounds_card_measures_a_reward_model_on_a_thumbs_or_ratings_round(mode, labels, scores, researcher,
                                                                             researcher_client):
    """Such a round stores no preference pair: the agreement reads the labels as tiers (1 of 2 pairs either way)."""
    project = _labels_project(mode)
    project.members.add(researcher)
    (annotator,) = make_annotators(1)
    project.members.add(annotator)
    first = add_round(project, "base", {"p0": ["b0", "b1"], "p1": ["b2", "b3"]})
    assert _label_all(project, annotator, lambda response: labels[response.text]) == 2
    scoring = RoundScoring.objects.create(round=first, checkpoint_path="rm", status=RoundScoring.Status.SUCCEEDED)
    RewardScore.objects.bulk_create(RewardScore(scoring=scoring, response=response, score=scores[response.text])
                                    for response in Response.objects.filter(round=first))

    row = selectors.round_rows(project)[0]
    assert (row.rm_agreement.agreed, row.rm_agreement.pairs, row.rm_agreement.answers) == (1, 2, 2)
    # thumbs: tau-b 1 on p0, none on p1 (its scores tie); ratings: -1 on p0, 1 on p1
    assert row.rm_agreement.tied == (1 if mode == "thumbs" else 0)
    assert row.rm_agreement.tau == (1.0 if mode == "thumbs" else 0.0)
    card = researcher_client.get(f"/projects/{project.pk}/rounds/").content.decode()
    tau = "1.000" if mode == "thumbs" else "0.000"
    assert f'agrees with 50 % (9–91 %) of 2 pairs <span class="rm-agreement">(1 of 2)</span> · τ-b {tau}' in card

    # p1's answer took a label from a suggestion: left out of the reward model's agreement too
    accepted = Suggestion.objects.create(project=project, prompt=Prompt.objects.get(external_id="p1"),
                                         question="ranking", value=[], agent=RM)
    ResponseLabel.objects.filter(prompt__external_id="p1", ranking__isnull=False).update(suggestion=accepted)
    row = selectors.round_rows(project)[0]
    assert (row.rm_agreement.pairs, row.rm_agreement.answers, row.rm_agreement.left_out) == (1, 1, 1)
    card = researcher_client.get(f"/projects/{project.pk}/rounds/").content.decode()
    assert "1 answer left out (accepted a suggestion)" in card


def test_a_comparison_counts_a_machine_tie_apart_and_its_tau_b():
    comparison = suggestion_agreement.compare([[1, 2], [3]], [[2], [1], [3]])
    assert (comparison.agreed, comparison.tied, comparison.pairs) == (2, 1, 3)
    assert comparison.tau == pytest.approx(2 / math.sqrt(6))
    # responses only one side ordered are not compared
    assert suggestion_agreement.compare([[1], [2]], [[2], [9]]).pairs == 0
    assert suggestion_agreement.suggested_tiers(None, {1: [True], 2: [0], 3: [1, 0.5]}) == [[1], [3], [2]]
    assert suggestion_agreement.suggested_tiers([[1], ["2"]], {}) is None

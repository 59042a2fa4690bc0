from collections.abc import Sequence

from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from trainer.config import SEED_MAX
from webapp.annotation.aggregation import ANNOTATOR_PREFIX, AggregationError, aggregation_check
from webapp.annotation.feedback import BINARIZATIONS, DEFAULT_BINARIZATION, DEFAULT_SEED
from webapp.annotation.importing import FORMATS
from webapp.annotation.models import GENERATION_SETTING_BOUNDS, Project, Round
from webapp.annotation.preferences import STRATEGIES
from webapp.annotation.services import (
    guidelines_check,
    mode_change_check,
    rating_aspects_check,
    rating_scale_check,
)
from webapp.annotation.suggestions import uncertainty_reordering
from webapp.experiments.models import ModelRef
from webapp.experiments.selectors import models_offered
from webapp.text import counted
from webapp.text_bounds import GUIDELINES_MAX_CHARS
from webapp.uploads import limit_text


class ProjectForm(forms.ModelForm):
    members = forms.ModelMultipleChoiceField(
        queryset=User.objects.filter(is_active=True).order_by("username"),
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Annotators ticked here annotate this project; researchers ticked here see and manage it as its "
                  "owner does.",
    )

    rating_aspects = forms.CharField(
        required=False, label="Rating aspects",
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "helpfulness: Does it answer the question?\n"
                                                               "honesty: Does it say only what is true?"}),
        help_text="Ratings mode: one aspect a line, “name: description” (the description is shown to annotators). "
                  "Left empty, responses are rated on one aspect, “overall”.",
    )

    # Gold items and annotators' quality (services/quality.py); a form sent without them keeps the project's values.
    gold_rate = forms.FloatField(
        required=False, min_value=0, max_value=1, label="Gold rate",
        help_text="Share of each annotator's items that are gold items, 0 to 1: 0.1 makes every tenth item gold "
                  "(mark items gold on their item page). Gold answers count as data like any other.")
    gold_onboarding = forms.IntegerField(
        required=False, min_value=0, max_value=1000, label="Gold items first",
        help_text="How many gold items each annotator gets first, as onboarding, before any other item.")
    gold_min_answers = forms.IntegerField(
        required=False, min_value=1, max_value=1000, label="Gold answers before judging",
        help_text="An annotator's accuracy on gold is judged once they have answered this many gold items.")
    gold_min_accuracy = forms.FloatField(
        required=False, min_value=0, max_value=1, label="Least accuracy on gold",
        help_text="0 to 1 (0.8 = 80%): below it an annotator is paused, their answers held back from training "
                  "until you release or drop them on the project page. 0 never pauses.")
    fast_answer_seconds = forms.FloatField(
        required=False, min_value=0, max_value=3600, label="Fast answer (seconds)",
        help_text="Answers given faster than this are counted as fast in the annotators' table.")
    QUALITY_FIELDS = ("gold_rate", "gold_onboarding", "gold_min_answers", "gold_min_accuracy", "fast_answer_seconds")

    class Meta:
        model = Project
        fields = ["name", "mode", "guidelines", "responses_per_item", "annotators_per_item", "lease_minutes",
                  "rating_aspects", "rating_min", "rating_max", "suggestions_display", "queue_order", "members",
                  "gold_rate", "gold_onboarding", "gold_min_answers", "gold_min_accuracy", "fast_answer_seconds",
                  "adjudication_min_answers", "adjudication_threshold"]
        labels = {"rating_min": "Lowest rating", "rating_max": "Highest rating",
                  "suggestions_display": "Machine suggestions", "queue_order": "Queue order",
                  "adjudication_min_answers": "Adjudication after", "adjudication_threshold": "Adjudication below"}
        help_texts = {
            "suggestions_display": "Suggestions from a reward model or a judge (or imported), marked as a machine's "
                                   "with their source and confidence, never filled in: an annotator accepts one with "
                                   "M. “After the annotator answers” shows, above the next item, what the machine "
                                   "had suggested for the last one.",
            "queue_order": "Least confident suggestion first: among items with as many answers, those whose "
                           "suggestion is least confident come first, items without a suggestion last. The "
                           "project page says how many open items this moves.",
            "rating_max": "Ratings mode: the scale, within 0–10 and at most 10 values (one digit key "
                          "each; 0 gives 10 on a scale that reaches 10).",
            "adjudication_min_answers": "Answers an item needs before its agreement can send it to "
                                        "adjudication (2 or more).",
            "adjudication_threshold": "Agreement (0 to 1: the share of annotator pair × response pair "
                                      "comparisons that agree) below which such an item waits for a "
                                      "researcher's decision; 0 sends none."}
        widgets = {
            "guidelines": forms.Textarea(attrs={"rows": 6, "placeholder": "Markdown"}),
            # the browser refuses these before sending; the clean_ methods below say it when it does not
            "responses_per_item": forms.NumberInput(attrs={"min": 2}),
            "annotators_per_item": forms.NumberInput(attrs={"min": 1}),
            "lease_minutes": forms.NumberInput(attrs={"min": 1}),
            "adjudication_min_answers": forms.NumberInput(attrs={"min": 2}),
            "adjudication_threshold": forms.NumberInput(attrs={"min": 0, "max": 1, "step": 0.05}),
        }

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        # no maxlength on the box: a browser would cut a longer paste short without a word
        self.fields["guidelines"].help_text = (f"Markdown, shown to annotators before their first item and a key "
                                               f"away (G) on every annotate page. At most "
                                               f"{GUIDELINES_MAX_CHARS:,} characters.")
        # only the ratings mode reads the scale, and the suggestion settings have defaults: a form sent without
        # them keeps the project's
        for name in ("rating_min", "rating_max", "suggestions_display", "queue_order"):
            self.fields[name].required = False
        if self.instance.pk:
            reordering = uncertainty_reordering(self.instance)
            self.fields["queue_order"].help_text += (f" Now it would reorder {reordering.moved} of "
                                                     f"{counted(reordering.open_items, 'open item')} "
                                                     f"({reordering.percent} %).")
        # a form sent without them (an older page, a script) keeps the project's
        for name in ("adjudication_min_answers", "adjudication_threshold"):
            self.fields[name].required = False
        if self.instance.pk and not self.is_bound:
            self.initial["rating_aspects"] = "\n".join(
                f"{aspect['name']}: {aspect['description']}" if aspect.get("description") else aspect["name"]
                for aspect in self.instance.rating_aspects)

    def clean_mode(self) -> str:
        mode = self.cleaned_data["mode"]
        try:
            mode_change_check(self.instance, mode)
        except ValidationError as error:
            message = error.message_dict["mode"][0]
            raise forms.ValidationError(message[:1].upper() + message[1:] + ".") from None
        return mode

    def clean_rating_aspects(self) -> list[dict[str, str]]:
        """One aspect a line, "name: description"; blank lines are left out."""
        aspects = []
        for number, line in enumerate(self.cleaned_data["rating_aspects"].splitlines(), start=1):
            if not line.strip():
                continue
            name, _, description = line.partition(":")
            if not name.strip():
                raise forms.ValidationError(f"Line {number}: an aspect needs a name before the colon, "
                                            "“name: description”.")
            aspects.append({"name": name.strip(), "description": description.strip()})
        try:
            return rating_aspects_check(aspects)
        except ValidationError as error:
            raise forms.ValidationError(error.message_dict["rating_aspects"]) from None

    def clean_adjudication_min_answers(self) -> int:
        value = self.cleaned_data["adjudication_min_answers"]
        if value is None:
            return self.instance.adjudication_min_answers
        if value < 2:
            raise forms.ValidationError("At least 2: agreement needs two answers to compare.")
        return value

    def clean_adjudication_threshold(self) -> float:
        value = self.cleaned_data["adjudication_threshold"]
        if value is None:
            return self.instance.adjudication_threshold
        if not 0 <= value <= 1:
            raise forms.ValidationError(f"A share from 0 to 1, not {value:g}.")
        return value

    def clean_rating_min(self) -> int:
        value = self.cleaned_data["rating_min"]
        return self.instance.rating_min if value is None else value

    def clean_suggestions_display(self) -> str:
        return self.cleaned_data["suggestions_display"] or self.instance.suggestions_display

    def clean_queue_order(self) -> str:
        return self.cleaned_data["queue_order"] or self.instance.queue_order

    def clean_rating_max(self) -> int:
        value = self.cleaned_data["rating_max"]
        return self.instance.rating_max if value is None else value

    def clean(self) -> dict:
        cleaned = super().clean()
        for name in self.QUALITY_FIELDS:
            if cleaned.get(name) is None and name not in self.errors:
                cleaned[name] = getattr(self.instance, name)
        low, high = cleaned.get("rating_min"), cleaned.get("rating_max")
        if low is not None and high is not None:
            try:
                rating_scale_check(low, high)
            except ValidationError as error:
                for field, messages in error.message_dict.items():
                    self.add_error(field, [message[:1].upper() + message[1:] + "." for message in messages])
        return cleaned

    def clean_guidelines(self) -> str:
        guidelines = self.cleaned_data["guidelines"]
        try:
            guidelines_check(guidelines)
        except ValidationError as error:
            raise forms.ValidationError(error.message_dict["guidelines"]) from None
        return guidelines

    # The database's check constraints would say 'Constraint "…" is violated': say it in words first.
    def clean_responses_per_item(self) -> int:
        value = self.cleaned_data["responses_per_item"]
        if value < 2:
            raise forms.ValidationError(f"An item needs at least 2 responses to compare; {value} was given.")
        return value

    def clean_annotators_per_item(self) -> int:
        value = self.cleaned_data["annotators_per_item"]
        if value < 1:
            raise forms.ValidationError("Each item needs at least 1 annotator.")
        return value

    def clean_lease_minutes(self) -> int:
        value = self.cleaned_data["lease_minutes"]
        if value < 1:
            raise forms.ValidationError("A lease lasts at least 1 minute.")
        return value


_FORMAT_LABELS = {"parquet": "Parquet", "dataset": "datasets directory (zip)"}


class ImportForm(forms.Form):
    file = forms.FileField(help_text=(
        "JSONL, CSV, Parquet or a zipped Hugging Face datasets directory: {prompt, responses}, {prompt}, "
        "{prompt, chosen, rejected}, chat messages, TRL's unpaired {prompt, completion, label}, or Argilla's "
        "exported records."))
    file_format = forms.ChoiceField(
        choices=[("auto", "from the file name"), *((name, _FORMAT_LABELS.get(name, name.upper())) for name in FORMATS)],
        initial="auto",
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["file"].help_text += f" At most {limit_text()}."


def _setting_field(field_class: type[forms.Field], name: str, **options: object) -> forms.Field:
    least, most = GENERATION_SETTING_BOUNDS[name]
    return field_class(min_value=least, max_value=most, **options)


NO_COMPARISON = "none"


class SamplingForm(forms.Form):
    model_path = forms.CharField(
        max_length=500,
        label="Model",
        help_text="A registered model or a run's checkpoint by name (suggested as you type), a directory under "
                  "the model roots, or a hub id (org/name).",
        widget=forms.TextInput(attrs={"list": "known-models", "autocomplete": "off"}),
    )
    responses_per_prompt = _setting_field(forms.IntegerField, "responses_per_prompt", initial=4)
    max_new_tokens = _setting_field(forms.IntegerField, "max_new_tokens", initial=128)
    temperature = _setting_field(forms.FloatField, "temperature", initial=1.0)
    top_p = _setting_field(forms.FloatField, "top_p", initial=1.0)
    seed = _setting_field(forms.IntegerField, "seed", initial=0)
    compare_with = forms.ChoiceField(
        required=False, label="Compare with",
        help_text="Prompts that hold responses already get new items: the new responses beside this round's "
                  "best-ranked response to the same prompt.",
    )

    def __init__(self, *args: object, user: User, rounds: Sequence[Round] = (), **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["compare_with"].choices = [
            ("", "the latest round"), (NO_COMPARISON, "no round (each prompt's own best-ranked response)"),
            *[(str(round_.number), f"round {round_.number} · {round_.model or round_.get_source_display()}")
              for round_ in reversed(rounds)],
        ]

    def known_models(self) -> list[ModelRef]:
        """The suggestions: causal LMs (and hub ids of unknown kind) the user sees, newest checkpoint of each run
        first."""
        return models_offered((ModelRef.Architecture.CAUSAL_LM,), user=self.user)


def aggregation_choices(annotators: list[str]) -> list[tuple[str, str]]:
    """The aggregations a project offers: the four rules, then one annotator's pairs for each annotator."""
    return [("all", "all pairs (every annotator's)"), ("majority", "majority (one row a pair, ties dropped)"),
            ("drop_conflicts", "drop conflicts (one row a pair all agree on)"),
            ("resolved", "resolved only (unanimous, majority and adjudicated items)")] + [
        (f"{ANNOTATOR_PREFIX}{name}", f"only {name}'s pairs") for name in annotators]


class ExportForm(forms.Form):
    strategy = forms.ChoiceField(choices=[(name, name.replace("_", " ")) for name in STRATEGIES], initial="all")
    aggregation = forms.CharField(required=False, initial="all", help_text=(
        "How the pairs of annotators who disagree are combined (see the README, «Annotators who disagree»)."),
        widget=forms.Select)
    # how a ratings project's ratings become pairs (webapp.annotation.feedback)
    binarization = forms.ChoiceField(
        required=False, initial=DEFAULT_BINARIZATION, label="Ratings to pairs",
        choices=[(name, {"random": "random lower-rated response (UltraFeedback)", "worst": "worst-rated response"}[name])
                 for name in BINARIZATIONS],
        help_text="Ratings: chosen is the best mean rating; rejected a random lower-rated response (seeded), or the "
                  "worst.")
    seed = forms.IntegerField(required=False, min_value=0, max_value=SEED_MAX, initial=DEFAULT_SEED,
                              label="Binarization seed")

    def __init__(self, *args: object, annotators: list[str] | None = None, ratings: bool = True,
                 **kwargs: object) -> None:
        """`ratings`: whether the binarization fields are offered (a project page shows them for ratings only)."""
        super().__init__(*args, **kwargs)
        self.fields["aggregation"].widget.choices = aggregation_choices(annotators or [])
        if not ratings:
            del self.fields["binarization"], self.fields["seed"]

    def clean_binarization(self) -> str:
        return self.cleaned_data["binarization"] or DEFAULT_BINARIZATION

    def clean_seed(self) -> int:
        seed = self.cleaned_data["seed"]
        return DEFAULT_SEED if seed is None else seed

    def clean_aggregation(self) -> str:
        try:
            return aggregation_check(self.cleaned_data["aggregation"] or "all")
        except AggregationError as error:
            raise ValidationError(str(error)) from None

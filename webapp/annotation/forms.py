from collections.abc import Sequence

from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from webapp.annotation.aggregation import ANNOTATOR_PREFIX, AggregationError, aggregation_check
from webapp.annotation.importing import FORMATS
from webapp.annotation.models import GENERATION_SETTING_BOUNDS, Project, Round
from webapp.annotation.preferences import STRATEGIES
from webapp.annotation.services import guidelines_check
from webapp.experiments.models import ModelRef
from webapp.experiments.selectors import models_offered
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

    class Meta:
        model = Project
        fields = ["name", "mode", "guidelines", "responses_per_item", "annotators_per_item", "lease_minutes", "members"]
        widgets = {
            "guidelines": forms.Textarea(attrs={"rows": 6, "placeholder": "Markdown"}),
            # the browser refuses these before sending; the clean_ methods below say it when it does not
            "responses_per_item": forms.NumberInput(attrs={"min": 2}),
            "annotators_per_item": forms.NumberInput(attrs={"min": 1}),
            "lease_minutes": forms.NumberInput(attrs={"min": 1}),
        }

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        # no maxlength on the box: a browser would cut a longer paste short without a word
        self.fields["guidelines"].help_text = (f"Markdown, shown to annotators on every annotate page (G). At most "
                                               f"{GUIDELINES_MAX_CHARS:,} characters.")

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
    """The aggregations a project offers: the three rules, then one annotator's pairs for each annotator."""
    return [("all", "all pairs (every annotator's)"), ("majority", "majority (one row a pair, ties dropped)"),
            ("drop_conflicts", "drop conflicts (one row a pair all agree on)")] + [
        (f"{ANNOTATOR_PREFIX}{name}", f"only {name}'s pairs") for name in annotators]


class ExportForm(forms.Form):
    strategy = forms.ChoiceField(choices=[(name, name.replace("_", " ")) for name in STRATEGIES], initial="all")
    aggregation = forms.CharField(required=False, initial="all", help_text=(
        "How the pairs of annotators who disagree are combined (see the README, «Annotators who disagree»)."),
        widget=forms.Select)

    def __init__(self, *args: object, annotators: list[str] | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["aggregation"].widget.choices = aggregation_choices(annotators or [])

    def clean_aggregation(self) -> str:
        try:
            return aggregation_check(self.cleaned_data["aggregation"] or "all")
        except AggregationError as error:
            raise ValidationError(str(error)) from None

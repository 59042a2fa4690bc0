from django import forms
from django.contrib.auth.models import User

from webapp.annotation.importing import FORMATS
from webapp.annotation.models import Project
from webapp.annotation.preferences import STRATEGIES


class ProjectForm(forms.ModelForm):
    members = forms.ModelMultipleChoiceField(
        queryset=User.objects.filter(is_active=True).order_by("username"),
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Who may annotate this project.",
    )

    class Meta:
        model = Project
        fields = ["name", "mode", "guidelines", "responses_per_item", "annotators_per_item", "lease_minutes", "members"]
        widgets = {"guidelines": forms.Textarea(attrs={"rows": 6, "placeholder": "Markdown"})}


class ImportForm(forms.Form):
    file = forms.FileField(help_text="JSONL or CSV: {prompt, responses}, {prompt}, {prompt, chosen, rejected} or chat messages.")
    file_format = forms.ChoiceField(
        choices=[("auto", "from the file name"), *((name, name.upper()) for name in FORMATS)], initial="auto"
    )


class SamplingForm(forms.Form):
    model_path = forms.CharField(
        max_length=500,
        help_text="A registered model or checkpoint, a directory under the model roots, or a hub id.",
        widget=forms.TextInput(attrs={"list": "known-models", "autocomplete": "off"}),
    )
    responses_per_prompt = forms.IntegerField(min_value=2, max_value=16, initial=4)
    max_new_tokens = forms.IntegerField(min_value=1, max_value=4096, initial=128)
    temperature = forms.FloatField(min_value=0.0, max_value=5.0, initial=1.0)
    top_p = forms.FloatField(min_value=0.01, max_value=1.0, initial=1.0)
    seed = forms.IntegerField(min_value=0, initial=0)


class ExportForm(forms.Form):
    strategy = forms.ChoiceField(choices=[(name, name.replace("_", " ")) for name in STRATEGIES], initial="all")

from django import forms
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator

from webapp.accounts import selectors
from webapp.accounts.models import ApiToken
from webapp.annotation.models import Project


class AnnotatorCreateForm(forms.Form):
    username = forms.CharField(
        max_length=150,
        validators=[UnicodeUsernameValidator()],
        help_text="Letters, digits and @ . + - _ only. A one-time password is shown once after you create it.",
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )

    def clean_username(self) -> str:
        username = self.cleaned_data["username"].strip()
        if User.objects.filter(username__iexact=username).exists():
            raise forms.ValidationError(
                f"The username “{username}” is taken: add that user below, or pick another name."
            )
        return username


class MemberAddForm(forms.Form):
    user = forms.ModelChoiceField(queryset=User.objects.none(), empty_label="— choose a user —")

    def __init__(self, *args: object, project: Project, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["user"].queryset = selectors.users_who_could_join(project)


class ApiTokenCreateForm(forms.Form):
    # A form sent again (a reload of the page that showed the new token) makes no second token: see views.
    form_key = forms.CharField(widget=forms.HiddenInput)
    name = forms.CharField(
        max_length=ApiToken._meta.get_field("name").max_length,
        help_text="What will use it, e.g. “training box” or “eval script”: to recognise it here later.",
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )

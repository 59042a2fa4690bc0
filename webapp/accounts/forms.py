from django import forms
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator

from webapp.accounts import selectors
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

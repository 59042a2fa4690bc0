"""An uploaded training file may be in any of TRL's formats (trainer.formats.chat); the unpaired one is refused."""

import json

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from webapp.experiments import services

USER = {"role": "user", "content": "What is 2 + 2?"}


def _upload(rows, name="pairs.jsonl"):
    return SimpleUploadedFile(name, "\n".join(json.dumps(row) for row in rows).encode())


def assistant(text):
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize(
    ("kind", "row"),
    [
        ("reward_model", {"prompt": [USER], "chosen": assistant("4"), "rejected": assistant("5")}),
        ("dpo", {"chosen": [USER, *assistant("4")], "rejected": [USER, *assistant("5")]}),
        ("sft", {"messages": [USER, *assistant("4")]}),
        ("grpo", {"prompt": [USER], "answer": "4"}),
    ],
)
def test_conversational_uploads_are_kept(kind, row, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    source = services.upload_store(file=_upload([row, row]), kind=kind)
    assert source["rows"] == 2


def test_the_unpaired_format_is_refused_naming_label_and_the_line(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    rows = [
        {"prompt": "2 + 2", "chosen": "4", "rejected": "5"},
        {"prompt": "2 + 2", "completion": "4", "label": True},
    ]
    with pytest.raises(ValidationError) as refused:
        services.upload_store(file=_upload(rows), kind="dpo")
    assert refused.value.message_dict["upload"][0].startswith(
        "pairs.jsonl, line 2: field 'label' (TRL's unpaired preference format) is not supported"
    )


def test_a_text_answer_to_a_conversational_prompt_is_refused(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    rows = [{"prompt": [USER], "chosen": "4", "rejected": assistant("5")}]
    with pytest.raises(ValidationError) as refused:
        services.upload_store(file=_upload(rows), kind="dpo")
    assert refused.value.message_dict["upload"][0].startswith(
        "pairs.jsonl, line 1: field 'chosen' is text but the prompt is a conversation"
    )

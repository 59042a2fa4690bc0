"""trainer.formats.chat.normalize_record: TRL's standard, conversational and implicit-prompt records in, explicit
prompts out; the unpaired format and malformed records refused with the row and the field named."""

import pytest
from trl.data_utils import maybe_extract_prompt

from trainer.formats.chat import ChatFormatError, display_text, is_conversation, normalize_record

SYSTEM = {"role": "system", "content": "Be brief."}
USER = {"role": "user", "content": "What is 2 + 2?"}


def assistant(text):
    return [{"role": "assistant", "content": text}]


def normalize(row):
    return normalize_record(row, index=3, name="pairs.jsonl")


def test_is_conversation():
    assert is_conversation([USER])
    assert not is_conversation([])
    assert not is_conversation("What is 2 + 2?")
    assert not is_conversation([{"role": "user"}])
    assert not is_conversation([USER, "text"])


def test_standard_rows_come_back_unchanged():
    row = {"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5", "weight": 2.0, "answer": "4"}
    assert normalize(row) == row
    assert normalize(row) is not row


def test_conversational_rows_keep_their_messages_and_other_fields():
    row = {"prompt": [SYSTEM, USER], "completion": assistant("4"), "answer": "4"}
    assert normalize(row) == row


def test_messages_split_into_the_prompt_and_the_final_assistant_turn():
    row = {"messages": [SYSTEM, USER, *assistant("4")], "answer": "4"}
    assert normalize(row) == {"prompt": [SYSTEM, USER], "completion": assistant("4"), "answer": "4"}


@pytest.mark.parametrize(
    "row",
    [
        {"chosen": [SYSTEM, USER, *assistant("4")], "rejected": [SYSTEM, USER, *assistant("5")]},
        # a text prompt beside whole conversations is a label, not the prompt (TRL's maybe_extract_prompt)
        {"prompt": "2 + 2", "chosen": [USER, *assistant("4")], "rejected": [USER, *assistant("5")]},
        {"chosen": "Q: 2 + 2? A: 4", "rejected": "Q: 2 + 2? A: 5"},
    ],
)
def test_an_implicit_prompt_is_extracted_as_trl_extracts_it(row):
    expected = maybe_extract_prompt(dict(row))
    normalized = normalize(row)
    assert {key: normalized[key] for key in ("prompt", "chosen", "rejected")} == {
        key: expected[key] for key in ("prompt", "chosen", "rejected")
    }


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"prompt": "2 + 2", "completion": " 4", "label": True},
            r"pairs.jsonl row 3: field 'label' \(TRL's unpaired preference format\) is not supported",
        ),
        ({"prompt": [USER], "chosen": " 4", "rejected": assistant("5")}, r"row 3: field 'chosen' is text but the prompt"),
        ({"prompt": "2 + 2", "completion": assistant("4")}, r"row 3: field 'completion' is a list of messages but"),
        ({"prompt": [USER], "completion": [USER]}, r"row 3: field 'completion', message 0: .* got role 'user'"),
        ({"prompt": [{"role": "robot", "content": "x"}], "completion": assistant("4")}, r"unknown role 'robot'"),
        ({"prompt": [{"role": "user"}], "completion": assistant("4")}, r"field 'prompt', message 0: expected a dict"),
        ({"prompt": [{"role": "user", "content": 4}], "completion": assistant("4")}, r"content must be text, got int"),
        ({"prompt": 4, "completion": " 4"}, r"row 3: field 'prompt' must be text or a list of messages, got int"),
        ({"messages": [USER]}, r"field 'messages': the last message must be the assistant's"),
        ({"messages": assistant("4")}, r"field 'messages': needs a prompt before the final assistant turn"),
        ({"messages": [USER, *assistant("4")], "prompt": "x"}, r"give either 'messages' or 'prompt', not both"),
        ({"chosen": [USER, *assistant("4")], "rejected": "Q: A: 5"}, r"must both be conversations or both be text"),
        ({"chosen": assistant("4"), "rejected": [USER]}, r"share no prefix to take it from"),
    ],
)
def test_bad_records_name_the_row_and_the_field(row, message):
    with pytest.raises(ChatFormatError, match=message):
        normalize(row)


def test_normalizing_is_idempotent():
    row = normalize({"chosen": [SYSTEM, USER, *assistant("4")], "rejected": [SYSTEM, USER, *assistant("5")]})
    assert normalize(row) == row


def test_display_text_shows_roles_without_any_template():
    assert display_text([SYSTEM, USER]) == "system: Be brief.\nuser: What is 2 + 2?"
    assert display_text("2 + 2 =") == "2 + 2 ="

"""The one formatting module: TRL's dataset formats in, chat templates, token ids and end tokens.

A prompt is text or a conversation (a list of {"role", "content"} messages). A conversation goes through
the tokenizer's chat template with the generation prompt; a conversational completion is the template of
prompt + completion minus the prompt's templated text, so it ends with the template's end of turn. Templated
text is tokenised without adding special tokens again (the template already wrote its BOS). Every function
here does what TRL 1.16 does for the same record (data_utils.apply_chat_template, extract_prompt and the
DPO / reward / GRPO trainers' tokenisation), so Preflab trains on the ids TRL would.

Sampling: trainer.decoding.generation.HFGenerationBackend.generate takes each prompt as text or as a conversation and
encodes it with `encode_prompt` here. Hand it the conversation itself, not `prompt_text`'s string: that string
would be tokenised as plain text, with the tokenizer's special tokens (a second BOS) added again.

No torch and no transformers at import: the web imports this module; tokenizers are passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Message = dict[str, Any]
Conversation = list[Message]
TextOrConversation = str | Conversation

TEXT_FIELDS = ("prompt", "completion", "chosen", "rejected")
ROLES = ("system", "user", "assistant", "tool")


class ChatFormatError(ValueError):
    """A record is not in one of TRL's formats, or cannot be formatted; the message names the row and field.

    `problem` is the message without the file and row, for callers that report places their own way (a line)."""

    def __init__(self, message: str, *, problem: str = "") -> None:
        super().__init__(message)
        self.problem = problem or message


def is_conversation(value: object) -> bool:
    """A non-empty list of {"role", "content"} dicts."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(message, dict) and "role" in message and "content" in message for message in value)
    )


def _error(name: str, index: int, problem: str) -> ChatFormatError:
    return ChatFormatError(f"{name} row {index}: {problem}", problem=problem)


def _check_conversation(value: object, *, index: int, name: str, field: str) -> Conversation:
    """`value` as a conversation of string contents with known roles, or a ChatFormatError saying why not."""
    if not isinstance(value, list) or not value:
        raise _error(name, index, f"field {field!r} must be a non-empty list of messages")
    for position, message in enumerate(value):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise _error(
                name,
                index,
                f"field {field!r}, message {position}: expected a dict with 'role' and 'content', "
                f"got {message!r:.80}",
            )
        if message["role"] not in ROLES:
            raise _error(
                name,
                index,
                f"field {field!r}, message {position}: unknown role {message['role']!r} "
                f"(expected one of {', '.join(ROLES)})",
            )
        if not isinstance(message["content"], str):
            raise _error(
                name,
                index,
                f"field {field!r}, message {position}: content must be text, "
                f"got {type(message['content']).__name__}",
            )
    return [dict(message) for message in value]


def _check_assistant_turns(value: Conversation, *, index: int, name: str, field: str) -> None:
    for position, message in enumerate(value):
        if message["role"] != "assistant":
            raise _error(
                name,
                index,
                f"field {field!r}, message {position}: a {field} holds assistant messages, "
                f"got role {message['role']!r}",
            )


def _extract_prompt(chosen: TextOrConversation, rejected: TextOrConversation) -> tuple:
    """TRL's extract_prompt: the longest shared prefix (messages, or characters for text) is the prompt."""
    shared = 0
    for shared in range(min(len(chosen), len(rejected))):  # the index where they differ is the result
        if chosen[shared] != rejected[shared]:
            if chosen[shared - 1] == " ":  # TRL leaves the space before a text completion in the completion
                shared -= 1
            break
    return chosen[:shared], chosen[shared:], rejected[shared:]


def _implicit_prompt(row: dict, *, index: int, name: str) -> dict:
    """chosen/rejected whole conversations (or texts) sharing their prefix → explicit prompt + differing tails."""
    chosen, rejected = row["chosen"], row["rejected"]
    conversational = is_conversation(chosen)
    if conversational != is_conversation(rejected):
        raise _error(name, index, "'chosen' and 'rejected' must both be conversations or both be text")
    if conversational:
        chosen = _check_conversation(chosen, index=index, name=name, field="chosen")
        rejected = _check_conversation(rejected, index=index, name=name, field="rejected")
    prompt, chosen_tail, rejected_tail = _extract_prompt(chosen, rejected)
    if not prompt:
        raise _error(
            name,
            index,
            "missing field 'prompt', and 'chosen' and 'rejected' share no prefix to take it from",
        )
    if conversational:
        # TRL's rule leaves at least the last message of each in its tail, so no tail is empty
        _check_assistant_turns(chosen_tail, index=index, name=name, field="chosen")
        _check_assistant_turns(rejected_tail, index=index, name=name, field="rejected")
    return {**row, "prompt": prompt, "chosen": chosen_tail, "rejected": rejected_tail}


def _split_messages(row: dict, *, index: int, name: str) -> dict:
    """An SFT `messages` conversation → prompt = all but the final assistant turn, completion = that turn."""
    messages = _check_conversation(row["messages"], index=index, name=name, field="messages")
    if messages[-1]["role"] != "assistant":
        raise _error(
            name,
            index,
            f"field 'messages': the last message must be the assistant's, got role {messages[-1]['role']!r}",
        )
    if len(messages) < 2:
        raise _error(name, index, "field 'messages': needs a prompt before the final assistant turn")
    for field in ("prompt", "completion"):
        if field in row:
            raise _error(name, index, f"give either 'messages' or {field!r}, not both")
    rest = {key: value for key, value in row.items() if key != "messages"}
    return {**rest, "prompt": messages[:-1], "completion": messages[-1:]}


# The one field of TRL's unpaired rows that is not text: whether the completion is desirable.
LABEL_FIELD = "label"


def normalize_record(row: dict, *, index: int, name: str, unpaired: bool = False) -> dict:
    """A row in one of TRL's formats → explicit `prompt` (+ `completion` or `chosen`/`rejected`).

    Standard rows (text fields) come back unchanged. Conversational ones keep their message lists (copied):
    `messages` is split into prompt and final assistant turn, an implicit prompt is extracted from
    `chosen`/`rejected` as TRL's `maybe_extract_prompt` does. Other fields (answer, weight, margin...) are kept.
    TRL's unpaired format (prompt, completion, label) is refused unless `unpaired` (what KTO trains on), where its
    `label` must be true or false. Errors name `name`, the row and the field.
    """
    if not isinstance(row, dict):
        raise _error(name, index, f"expected a dict, got {type(row).__name__}")
    if "label" in row and "completion" in row and not unpaired:
        raise _error(
            name,
            index,
            "field 'label' (TRL's unpaired preference format) is not supported; "
            "give pairs as 'prompt', 'chosen', 'rejected'",
        )
    if unpaired and LABEL_FIELD in row and not isinstance(row[LABEL_FIELD], bool):
        raise _error(
            name,
            index,
            f"field 'label' must be true (desirable, a thumbs up) or false (undesirable), got {row[LABEL_FIELD]!r}",
        )
    if "messages" in row:
        return _split_messages(row, index=index, name=name)
    for field in TEXT_FIELDS:
        if field in row and not isinstance(row[field], str) and not isinstance(row[field], list):
            raise _error(
                name,
                index,
                f"field {field!r} must be text or a list of messages, got {type(row[field]).__name__}",
            )
    if "chosen" in row and "rejected" in row:
        prompt_is_conversation = isinstance(row.get("prompt"), list)
        # As TRL's maybe_extract_prompt: a text prompt beside whole conversations is a label, not the prompt.
        if "prompt" not in row or (is_conversation(row["chosen"]) and not prompt_is_conversation):
            return _implicit_prompt(row, index=index, name=name)
    if "prompt" not in row or not isinstance(row["prompt"], list):
        for field in TEXT_FIELDS:
            if isinstance(row.get(field), list):
                raise _error(
                    name,
                    index,
                    f"field {field!r} is a list of messages but the prompt is text; "
                    "give the prompt as a conversation too",
                )
        return dict(row)
    normalized = {**row, "prompt": _check_conversation(row["prompt"], index=index, name=name, field="prompt")}
    for field in ("completion", "chosen", "rejected"):
        if field not in row:
            continue
        if isinstance(row[field], str):
            raise _error(
                name,
                index,
                f"field {field!r} is text but the prompt is a conversation; give it as a list of "
                'assistant messages, e.g. [{"role": "assistant", "content": "..."}]',
            )
        normalized[field] = _check_conversation(row[field], index=index, name=name, field=field)
        _check_assistant_turns(normalized[field], index=index, name=name, field=field)
    return normalized


def has_chat_template(tokenizer: PreTrainedTokenizerBase) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _require_template(tokenizer: PreTrainedTokenizerBase, *, index: int | None, name: str) -> None:
    if not has_chat_template(tokenizer):
        problem = (
            "the prompt is a conversation but the model's tokenizer has no chat template; "
            "give the prompt as text, or use a model with a chat template"
        )
        where = f"{name} row {index}" if index is not None else name
        raise ChatFormatError(f"{where}: {problem}", problem=problem)


def _render(tokenizer: PreTrainedTokenizerBase, messages: Conversation, *, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def prompt_text(
    tokenizer: PreTrainedTokenizerBase,
    prompt: TextOrConversation,
    *,
    index: int | None = None,
    name: str = "data",
) -> str:
    """The text a model is prompted with: a conversation through the chat template with the generation prompt
    (as TRL's DPO and GRPO trainers do), text as it is."""
    if isinstance(prompt, str):
        return prompt
    _require_template(tokenizer, index=index, name=name)
    return _render(tokenizer, prompt, generation_prompt=True)


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str, *, templated: bool) -> list[int]:
    """Token ids of `text`. Templated text already holds the template's special tokens (its BOS), so none are
    added, as apply_chat_template(tokenize=True) does; plain text gets the tokenizer's own (TRL calls
    `tokenizer(text)`)."""
    return list(tokenizer(text, add_special_tokens=not templated)["input_ids"])


def is_templated(prompt: TextOrConversation) -> bool:
    return not isinstance(prompt, str)


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase,
    prompt: TextOrConversation,
    *,
    index: int | None = None,
    name: str = "data",
) -> list[int]:
    """The ids a model is prompted with, for sampling and training alike (TRL GRPO's _tokenize_prompts)."""
    return encode_text(
        tokenizer, prompt_text(tokenizer, prompt, index=index, name=name), templated=is_templated(prompt)
    )


def full_text(
    tokenizer: PreTrainedTokenizerBase,
    prompt: TextOrConversation,
    completion: TextOrConversation,
    *,
    add_eos: bool = True,
    index: int | None = None,
    name: str = "data",
) -> str:
    """prompt + completion as one text, as TRL's DPO and reward trainers tokenise it: a conversation through
    the template (no generation prompt), text with the eos token appended when it does not end with it."""
    if is_templated(prompt):
        _require_template(tokenizer, index=index, name=name)
        return _render(tokenizer, [*prompt, *completion], generation_prompt=False)
    eos = tokenizer.eos_token
    text = prompt + completion
    if add_eos and eos is not None and not completion.endswith(eos):
        text += eos
    return text


def common_prefix_length(ids: Sequence[int], other_ids: Sequence[int]) -> int:
    length = 0
    for a, b in zip(ids, other_ids, strict=False):
        if a != b:
            break
        length += 1
    return length


def encode_completions(
    tokenizer: PreTrainedTokenizerBase,
    prompt: TextOrConversation,
    completions: Sequence[TextOrConversation],
    *,
    add_eos: bool = True,
    index: int | None = None,
    name: str = "data",
) -> tuple[list[int], list[list[int]]]:
    """(prompt ids, [completion ids]) as TRL 1.16's DPOTrainer tokenises a row: the prompt alone and each
    prompt + completion as a whole; the completions start where all of them stop agreeing with the prompt
    (usually right after it; earlier when a template renders the prompt alone differently or tokens merge
    across the boundary). prompt ids + completion ids is exactly the whole tokenised sequence."""
    templated = is_templated(prompt)
    prompt_ids = encode_prompt(tokenizer, prompt, index=index, name=name)
    wholes = [
        encode_text(
            tokenizer,
            full_text(tokenizer, prompt, completion, add_eos=add_eos, index=index, name=name),
            templated=templated,
        )
        for completion in completions
    ]
    shared = min(common_prefix_length(prompt_ids, whole) for whole in wholes)
    return prompt_ids[:shared], [whole[shared:] for whole in wholes]


def _as_ids(value: object) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(item) for item in value]


def _template_end_of_turn(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The special token the chat template closes an assistant turn with (<|im_end|>, <|eot_id|>...), if any."""
    if not has_chat_template(tokenizer):
        return None
    marker = "Preflab-end-of-turn-probe"
    try:
        rendered = _render(
            tokenizer,
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": marker}],
            generation_prompt=False,
        )
    except Exception:  # a template that refuses this probe simply has no end token to find
        return None
    after = rendered.split(marker, 1)[-1] if marker in rendered else ""
    ids = tokenizer(after, add_special_tokens=False)["input_ids"] if after else []
    if ids and ids[0] in set(tokenizer.all_special_ids) | _special_added_ids(tokenizer):
        return int(ids[0])
    return None


def _special_added_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return {int(token_id) for token_id, token in decoder.items() if getattr(token, "special", False)}


def end_token_ids(tokenizer: PreTrainedTokenizerBase, generation_config: object = None) -> list[int]:
    """Every id that ends a turn: the tokenizer's eos, generation_config.eos_token_id (an int or a list) and
    the chat template's end-of-turn token when it is a special token. In that order, without repeats."""
    ids = [*_as_ids(tokenizer.eos_token_id), *_as_ids(getattr(generation_config, "eos_token_id", None))]
    end_of_turn = _template_end_of_turn(tokenizer)
    if end_of_turn is not None:
        ids.append(end_of_turn)
    return list(dict.fromkeys(ids))


def assistant_turn(text: str) -> Conversation:
    """A sampled completion as the conversational completion it stands for."""
    return [{"role": "assistant", "content": text}]


def display_text(value: TextOrConversation) -> str:
    """A prompt or completion for people to read in samples and logs: text as is, a conversation as
    "role: content" lines (no template, no special tokens)."""
    if isinstance(value, str):
        return value
    return "\n".join(f"{message['role']}: {message['content']}" for message in value)


def conversation_text(value: TextOrConversation) -> str:
    """The words of a completion (message contents joined), to check it is not empty and to show it."""
    if isinstance(value, str):
        return value
    return "\n".join(message["content"] for message in value)

"""A sampling job formats prompts as training does (trainer.formats.chat): on a chat model every prompt goes through the
chat template with the generation prompt, its ids are not tokenised again with special tokens, generation stops
at the model's end tokens and a stored response holds no special token. A model without a template gets text.

The job runs here in-process (sampling_job_execute, the function the Celery task calls); the worker path is
covered by test_sampling_job.py and the chat project's browser test."""

import pytest
import torch

from trainer.decoding.generation import GroupSamples, HFGenerationBackend
from trainer.formats.chat import encode_prompt
from trainer.modeling.models import load_reference, load_tokenizer
from webapp.annotation import services
from webapp.annotation.importing import ImportRecord
from webapp.annotation.models import Prompt, Response, SamplingJob
from webapp.annotation.selectors import prompts_for_training
from workers.sampling import _generation_prompt, _response_texts, sampling_job_execute

pytestmark = pytest.mark.django_db

GREEDY = {"responses_per_prompt": 2, "max_new_tokens": 24, "temperature": 0.0, "top_p": 1.0, "seed": 0}
CONVERSATION = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the capital of France?"}]


def _project(name: str, *, messages: list[dict] | None = None, text: str = "Name a colour of the sky.") -> object:
    project = services.project_create(name=name, responses_per_item=2)
    services.prompts_import(project=project, records=[
        ImportRecord(line=1, external_id="plain", text=text),
        *([ImportRecord(line=2, external_id="chat", text="flattened", messages=messages)] if messages else []),
    ])
    return project


def _run(project, model_dir, researcher, settings) -> SamplingJob:
    settings.MODEL_ROOTS = [model_dir.parent]
    job = services.sampling_job_create(project=project, model_path=str(model_dir), generation_settings=GREEDY,
                                       created_by=researcher)
    sampling_job_execute(job_id=job.pk)
    job.refresh_from_db()
    return job


def test_a_chat_model_samples_every_prompt_through_its_template_without_special_tokens(smollm2_dir, researcher,
                                                                                      settings):
    tokenizer = load_tokenizer(str(smollm2_dir))
    project = _project("Chat sampled", messages=CONVERSATION)
    job = _run(project, smollm2_dir, researcher, settings)
    assert job.status == SamplingJob.Status.SUCCEEDED, job.error

    plain, chat = Prompt.objects.get(external_id="plain"), Prompt.objects.get(external_id="chat")
    # a text prompt is one user turn on a chat model; a conversation is itself, never its flattened text
    assert _generation_prompt(plain, tokenizer) == [{"role": "user", "content": "Name a colour of the sky."}]
    assert _generation_prompt(chat, tokenizer) == CONVERSATION
    # the ids sampled from are the template's own, with no special token added again in front
    template_ids = tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)
    assert encode_prompt(tokenizer, CONVERSATION) == list(template_ids)

    responses = list(Response.objects.filter(prompt__project=project).values_list("text", flat=True))
    assert len(responses) == 4
    assert {r.source_detail["chat_template"] for r in Response.objects.filter(prompt__project=project)} == {True}
    special = set(tokenizer.all_special_tokens) | {"<|im_end|>", "<|im_start|>", "<|endoftext|>"}
    for text in responses:
        assert text.strip(), "greedy decoding of a templated prompt wrote nothing"
        assert not [token for token in special if token in text], text
    assert "Paris" in " ".join(Response.objects.filter(prompt=chat).values_list("text", flat=True))

    # training from the project sees the prompts as they were sampled: the text prompt as its one user turn
    trained = [row["prompt"] for row in prompts_for_training(project_id=project.pk)]
    assert trained == [[{"role": "user", "content": "Name a colour of the sky."}], CONVERSATION]
    assert encode_prompt(tokenizer, trained[0]) == encode_prompt(tokenizer, _generation_prompt(plain, tokenizer))


def test_a_model_without_a_template_samples_text_and_refuses_a_conversation(tiny_model_dir, researcher, settings):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    text_only = _project("Text sampled", text="Calculate 3 + 4\n")
    assert _generation_prompt(Prompt.objects.get(project=text_only), tokenizer) == "Calculate 3 + 4\n"
    assert _run(text_only, tiny_model_dir, researcher, settings).status == SamplingJob.Status.SUCCEEDED
    assert Response.objects.filter(prompt__project=text_only).first().source_detail["chat_template"] is False
    assert prompts_for_training(project_id=text_only.pk)[0]["prompt"] == "Calculate 3 + 4\n"

    with_chat = _project("Chat on a plain model", messages=CONVERSATION)
    job = _run(with_chat, tiny_model_dir, researcher, settings)
    assert job.status == SamplingJob.Status.FAILED
    assert "prompt 'chat' is a conversation but the model's tokenizer has no chat template" in job.error
    assert not Response.objects.filter(prompt__project=with_chat).exists()  # refused before sampling anything


def test_a_response_leaves_out_its_end_token_even_when_the_tokenizer_does_not_call_it_special(tiny_model_dir):
    tokenizer = load_tokenizer(str(tiny_model_dir))
    words = tokenizer("12 + 3", add_special_tokens=False)["input_ids"]
    end = tokenizer("=", add_special_tokens=False)["input_ids"][-1]  # an ordinary token, used as an end token
    ids = torch.tensor([[*words, end, words[0]], [*words, words[0], words[0]]])
    mask = torch.tensor([[1] * (len(words) + 1) + [0], [1] * (len(words) + 2)])
    samples = GroupSamples(prompt_ids=torch.zeros(2, 1, dtype=torch.long), prompt_mask=torch.ones(2, 1),
                           completion_ids=ids, completion_mask=mask, truncated=torch.tensor([False, True]),
                           logprobs=torch.zeros(ids.shape), texts=["", ""], group_size=1)
    first, second = _response_texts(samples, tokenizer, end_ids=[tokenizer.eos_token_id, end])
    assert first == tokenizer.decode(words) and "=" not in first
    assert second == tokenizer.decode([*words, words[0], words[0]])


def test_the_backend_stops_at_the_chat_models_end_of_turn(smollm2_dir):
    tokenizer = load_tokenizer(str(smollm2_dir))
    backend = HFGenerationBackend(load_reference(str(smollm2_dir)), tokenizer)
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in backend.end_token_ids


def test_a_chat_prompt_is_sampled_with_the_ids_its_training_rows_are_trained_on(smollm2_dir):
    from trainer.formats.data import Limits, tokenize_pairs
    from webapp.annotation.selectors import preference_pairs_for_training

    tokenizer = load_tokenizer(str(smollm2_dir))
    project = services.project_create(name="Same ids", responses_per_item=2)
    services.prompts_import(project=project, records=[
        ImportRecord(line=1, external_id="chat", text="flattened", messages=CONVERSATION, chosen="Paris.",
                     rejected="Lyon."),
    ])
    rows = preference_pairs_for_training(project_id=project.pk)
    (example,) = tokenize_pairs(rows, tokenizer, Limits(max_length=512, max_prompt_length=256), add_eos=False)
    sampled = encode_prompt(tokenizer, _generation_prompt(Prompt.objects.get(project=project), tokenizer))
    assert example.chosen.input_ids[: example.chosen.prompt_length] == sampled
    completion = tokenizer.decode(example.chosen.input_ids[example.chosen.prompt_length :])
    assert completion == "Paris.<|im_end|>\n"  # the assistant turn, closed by the template's end of turn

"""A sampling job's execution on a GPU worker: K samples from a model for each prompt of the project, as the job's
round (webapp/annotation/services/rounds.py places them). Every write goes through the annotation services.

Prompts are formatted by trainer.formats.chat, as training formats them: on a model with a chat template every prompt is
a conversation (a text prompt is one user turn) sent through the template with the generation prompt, and
its ids are not tokenised again with special tokens; a model without a template gets text. Generation stops
at any of the model's end tokens, and a stored response holds no special token.
"""

from __future__ import annotations

import torch

from trainer.decoding.generation import GroupSamples, HFGenerationBackend, SamplingParams
from trainer.formats.chat import ChatFormatError, TextOrConversation, has_chat_template
from trainer.modeling.models import load_reference, load_tokenizer
from webapp.annotation import selectors, services
from webapp.annotation.models import OPTIONAL_SETTINGS, Prompt, Response, SamplingJob
from workers.jobs import JobWork, error_text, job_run


def sampling_job_execute(*, job_id: int) -> None:
    """Run a queued sampling job; a job that is not queued any more (canceled, or a second message for it) is left
    alone. A cancel stops it between batches, keeping what it stored."""
    job_run(SAMPLING_WORK, job_id)


def _end(job_id: int, finished: bool) -> None:
    if finished:
        services.sampling_job_succeed(job_id=job_id)
    else:
        services.sampling_job_stopped(job_id=job_id)


def _sample_into_project(job: SamplingJob) -> bool:
    """Sample the round's prompts batch by batch; False if it stopped early on a cancel. A resumed job continues its
    count: the prompts it sampled before are not selected again."""
    options = job.generation_settings
    per_prompt = int(options["responses_per_prompt"])
    path = services.model_path_check(job.model_path)
    # a job made before rounds fills prompts up to K as jobs did then; a round's job samples each prompt once
    if job.round_id is None:
        prompts = selectors.prompts_to_sample(project_id=job.project_id, responses_per_prompt=per_prompt)
    else:
        prompts = selectors.prompts_to_sample_for_round(round_id=job.round_id)
    done = job.progress_done if job.progress_total else 0
    services.sampling_job_progress(job_id=job.pk, done=done, total=done + len(prompts))
    if not prompts:
        return True
    torch.manual_seed(int(options.get("seed", 0)))
    tokenizer = load_tokenizer(path)
    generation_prompts = {prompt.pk: _generation_prompt(prompt, tokenizer) for prompt in prompts}
    # a frozen model (eval mode, no gradients): bf16 on a GPU that has it, as nothing here trains
    backend = HFGenerationBackend(load_reference(path), tokenizer)
    params = SamplingParams(
        group_size=per_prompt,
        max_new_tokens=int(options["max_new_tokens"]),
        temperature=float(options["temperature"]),
        top_p=float(options["top_p"]),
    )
    # whether prompts went through the chat template: a text prompt was then sampled as one user turn
    detail = {"model": job.model_path, "sampling_job": job.pk, "chat_template": has_chat_template(tokenizer), **options}
    batch_size = int(options.get("batch_size", OPTIONAL_SETTINGS["batch_size"]))
    for start in range(0, len(prompts), batch_size):
        if services.sampling_job_should_stop(job_id=job.pk):
            return False
        batch = prompts[start : start + batch_size]
        samples = backend.generate([generation_prompts[prompt.pk] for prompt in batch], params)
        responses = _response_texts(samples, tokenizer, end_ids=backend.end_token_ids)
        for index, prompt in enumerate(batch):
            texts = responses[index * per_prompt : (index + 1) * per_prompt]
            if job.round_id is None:
                services.responses_add(prompt_id=prompt.pk, texts=texts[: per_prompt - prompt.response_count],
                                       source=Response.Source.MODEL, source_detail=detail)
            else:
                services.round_responses_add(round_id=job.round_id, prompt_id=prompt.pk, texts=texts,
                                             source=Response.Source.MODEL, source_detail=detail)
        done += len(batch)
        services.sampling_job_progress(job_id=job.pk, done=done)
    return True


def _generation_prompt(prompt: Prompt, tokenizer) -> TextOrConversation:
    """What the model is prompted with, as trainer.formats.chat takes it. A chat model prompted with bare text writes
    badly (SmolLM2-135M-Instruct: 4 of 6 raw samples empty, 0 of 6 templated), so a text prompt becomes one user
    turn on a model with a template; a conversation for a model without a template is refused, as training
    would refuse it, rather than sampled in a format nothing trains on."""
    if not has_chat_template(tokenizer):
        if prompt.messages:
            raise ChatFormatError(
                f"prompt {prompt.external_id!r} is a conversation but the model's tokenizer has no chat "
                "template: sample it from a chat model, or import the prompt as text"
            )
        return prompt.text
    return prompt.messages or [{"role": "user", "content": prompt.text}]


def _response_texts(samples: GroupSamples, tokenizer, *, end_ids: list[int]) -> list[str]:
    """Each completion's words: its ids up to its end token, that token and any other special token left out
    (an end token from generation_config need not be flagged special in the tokenizer)."""
    ended = set(end_ids)
    texts = []
    for ids, mask in zip(samples.completion_ids.tolist(), samples.completion_mask.tolist(), strict=True):
        kept = [token for token, real in zip(ids, mask, strict=True) if real and token not in ended]
        texts.append(tokenizer.decode(kept, skip_special_tokens=True))
    return texts


SAMPLING_WORK = JobWork(
    noun="sampling job", name="sampling",
    claim=lambda job_id: services.sampling_job_start(job_id=job_id),
    heartbeat=lambda job_id: services.sampling_job_heartbeat(job_id=job_id),
    load=lambda job_id: SamplingJob.objects.select_related("project").get(pk=job_id),
    body=_sample_into_project, succeed=_end,
    fail=lambda job_id, error: services.sampling_job_fail(job_id=job_id, error=error_text(error)),
)

"""A sampling job's execution on a GPU worker: fill each prompt of a project lacking responses up to K with
samples from a model. Every write goes through the annotation services."""

from __future__ import annotations

import logging

import torch

from trainer.generation import HFGenerationBackend, SamplingParams
from trainer.models import load_policy, load_tokenizer
from webapp.annotation import selectors, services
from webapp.annotation.models import Prompt, Response, SamplingJob

logger = logging.getLogger(__name__)


def sampling_job_execute(*, job_id: int) -> None:
    """Run a queued sampling job; a job that is not queued any more is left alone."""
    if not services.sampling_job_start(job_id=job_id):
        return
    job = SamplingJob.objects.select_related("project").get(pk=job_id)
    try:
        _sample_into_project(job)
    except Exception as error:
        logger.exception("sampling job %s failed", job_id)
        services.sampling_job_fail(job_id=job_id, error=f"{type(error).__name__}: {error}")
        return
    services.sampling_job_succeed(job_id=job_id)


def _sample_into_project(job: SamplingJob) -> None:
    options = job.generation_settings
    per_prompt = int(options["responses_per_prompt"])
    path = services.model_path_check(job.model_path)
    prompts = selectors.prompts_to_sample(project_id=job.project_id, responses_per_prompt=per_prompt)
    services.sampling_job_progress(job_id=job.pk, done=0, total=len(prompts))
    if not prompts:
        return
    torch.manual_seed(int(options.get("seed", 0)))
    tokenizer = load_tokenizer(path)
    backend = HFGenerationBackend(load_policy(path).eval(), tokenizer)
    params = SamplingParams(
        group_size=per_prompt,
        max_new_tokens=int(options["max_new_tokens"]),
        temperature=float(options["temperature"]),
        top_p=float(options["top_p"]),
    )
    detail = {"model": job.model_path, "sampling_job": job.pk, **options}
    batch_size = int(options.get("batch_size", 8))
    done = 0
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start : start + batch_size]
        samples = backend.generate([_generation_text(prompt, tokenizer) for prompt in batch], params)
        for index, prompt in enumerate(batch):
            texts = samples.texts[index * per_prompt : (index + 1) * per_prompt]
            services.responses_add(prompt_id=prompt.pk, texts=texts[: per_prompt - prompt.response_count],
                                   source=Response.Source.MODEL, source_detail=detail)
        done += len(batch)
        services.sampling_job_progress(job_id=job.pk, done=done)


def _generation_text(prompt: Prompt, tokenizer) -> str:
    if prompt.messages and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(prompt.messages, tokenize=False, add_generation_prompt=True)
    return prompt.text

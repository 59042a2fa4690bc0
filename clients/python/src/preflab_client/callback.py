"""`PreflabCallback`: a transformers `TrainerCallback` that logs a Trainer's (or a TRL trainer's) run to Preflab.

    from preflab_client import PreflabCallback
    trainer = GRPOTrainer(..., callbacks=[PreflabCallback(url, token)])

- on_train_begin: an external run named after the run (args.run_name, else the output directory), its config
  the TrainingArguments (`to_dict()`, tokens masked by transformers) with the model's name, and max_steps as
  its total steps;
- on_log: every logged value at state.global_step under Preflab's names (preflab_client.metric_names), and
  what a TRL GRPO-style trainer generated since the last log (its `_logs` of prompts, completions, rewards per
  function and advantages, which TRL 1.16 keeps whether or not `log_completions` is set) as samples;
  the figures transformers logs once at the end of train() (train_runtime, train_samples_per_second,
  train_steps_per_second, total_flos, train_loss) go to the run's summary instead of one-point charts, and the
  latest evaluation's figures (eval/...) to the summary as well as to their charts;
- Cancel on the run's page stops training at the end of the current step (control.should_training_stop);
- on_train_end: the run stays open, as a W&B run does, so that what comes after train() (trainer.evaluate(),
  a final table) lands in it; the training's end is in its summary (training/ended_at_step). The run succeeds
  when the program ends (fails, if it ends on an uncaught exception), at the next train(), or at
  `callback.finish()`; a run stopped from Preflab is canceled at once.

`report_to="preflab"` (TrainingArguments): importing preflab_client registers "preflab" with transformers
(preflab_client.integration); the callback is then made with no arguments, from PREFLAB_URL / PREFLAB_TOKEN.

A failure: transformers has no callback event for an exception. The callback wraps the trainer's
`training_step` (where the forward, backward, generation and reward functions run), so an exception there
fails the run with its text before it propagates. An exception elsewhere (the data loader, another callback)
is seen only when the program ends: the run is then failed as "ended before training finished". A program
that catches such an exception and goes on (a notebook) should call `callback.run.fail(message)` itself.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as missing:  # the client itself needs only requests
    raise ImportError("PreflabCallback needs transformers, which is not installed here: "
                      "pip install 'preflab-client[transformers]'") from missing

from preflab_client.client import Client
from preflab_client.metric_names import preflab_metrics
from preflab_client.runs import FINISH_TIMEOUT, ExternalRun

logger = logging.getLogger("preflab_client")

# how long the program's end waits to finish the run (and send its last rows)
EXIT_FINISH_TIMEOUT = 5.0
# What Trainer logs once, at the end of train() (transformers' speed_metrics, total_flos, train_loss): a summary
END_OF_TRAINING_FIGURES = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos",
                           "train_loss")


class PreflabCallback(TrainerCallback):
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        name: str | None = None,
        project_id: int | None = None,
        config: Mapping[str, Any] | None = None,
        samples: bool = True,
        client: Client | None = None,
        finish_timeout: float = FINISH_TIMEOUT,
        tags: Sequence[str] = (),
        group: str | None = None,
        system_metrics: bool | float = False,
    ) -> None:
        """url / token default to PREFLAB_URL / PREFLAB_TOKEN. `config` adds fields to the run's config;
        `samples=False` leaves TRL's completions out; `tags`, `group` and `system_metrics` as in
        Client.init_run."""
        self._owns_client = client is None
        self.client = client if client is not None else Client(url, token)
        self.name = name
        self.project_id = project_id
        self.extra_config = dict(config or {})
        self.samples = samples
        self.finish_timeout = finish_timeout
        self.tags = list(tags)
        self.group = group
        self.system_metrics = system_metrics
        self.run: ExternalRun | None = None
        self.trainer: Any = None
        self._stopped_from_preflab = False
        self._training_ended = False
        self._last_completions: int | None = None

    def __repr__(self) -> str:
        return f"PreflabCallback(url={self.client.url!r}, run={self.run!r})"

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        if self.run is not None and not self.run.finished:
            if self._training_ended:
                self._end_run("succeeded")
            else:
                self.run.fail("training began again before the previous training ended (did it raise?)",
                              timeout=self.finish_timeout)
        self.trainer = find_trainer(self)
        config = {**args.to_dict(), "model": model_name(model), **self.extra_config}
        if self.trainer is not None:
            config.setdefault("trainer", type(self.trainer).__name__)
        name = self.name or args.run_name or Path(args.output_dir or "").name or "transformers run"
        try:
            self.run = self.client.init_run(name, config=config, project_id=self.project_id,
                                            total_steps=state.max_steps or None, tags=self.tags, group=self.group,
                                            system_metrics=self.system_metrics)
        except Exception as error:  # reporting must not stop the training
            logger.error("preflab: could not start a run on %s (%s); training goes on without reporting to it",
                         self.client.url, error)
            self.run = None
            return
        logger.info("preflab: logging to run %d: %s", self.run.id, self.run.url or self.client.url)
        self._stopped_from_preflab = False
        self._training_ended = False
        self._last_completions = None
        if self.trainer is not None:
            _wrap_training_step(self.trainer, self._training_raised)
        atexit.register(self._at_exit)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.run is None or not state.is_world_process_zero:
            return
        try:
            logs = dict(logs or {})
            if "train_runtime" in logs:  # the end of train(): figures of the whole training, not a chart's point
                self.run.summary.update({name: value for name, value in logs.items()
                                         if name in END_OF_TRAINING_FIGURES or name == "epoch"})
                logs = {name: value for name, value in logs.items()
                        if name not in END_OF_TRAINING_FIGURES and name != "epoch"}
            evaluation = {name: value for name, value in preflab_metrics(logs).items() if name.startswith("eval/")}
            if evaluation:
                self.run.summary.update({**evaluation, "eval/step": state.global_step})
            tokens = logs.get("num_tokens", logs.get("num_input_tokens_seen"))
            if logs:
                self.run.log(preflab_metrics(logs), step=state.global_step,
                             tokens_seen=int(tokens) if isinstance(tokens, int | float) else None)
            if self.samples:
                self._log_completions(state.global_step)
        except Exception as error:
            logger.warning("preflab: could not log step %d: %s", state.global_step, error)
        self._stop_if_asked(control)

    def on_step_end(self, args, state, control, **kwargs):
        self._stop_if_asked(control)

    def on_train_end(self, args, state, control, **kwargs):
        if self.run is None or self.run.finished:
            return
        if self.trainer is not None:
            _unwrap_training_step(self.trainer)
        if self._stopped_from_preflab:
            self._end_run("canceled")
            return
        self._training_ended = True
        self.run.summary.update({"training/ended_at_step": state.global_step})

    def finish(self, status: str | None = None, *, error: str | None = None) -> None:
        """End the run now (W&B's wandb.finish()): "succeeded" unless told otherwise. Else it ends when the
        program does, or when train() begins again."""
        if self.run is not None and not self.run.finished:
            self._end_run(status or "succeeded", error)

    def _stop_if_asked(self, control) -> None:
        if self.run is not None and self.run.should_stop and not control.should_training_stop:
            logger.info("preflab: run %d was canceled on Preflab; training stops after this step", self.run.id)
            self._stopped_from_preflab = True
            control.should_training_stop = True

    def _log_completions(self, step: int) -> None:
        """TRL's latest generation batch as samples, once: its `_logs` keep the last batch until the next
        generation, so a log without a new generation in between finds the same batch again."""
        logs = getattr(self.trainer, "_logs", None)
        if not isinstance(logs, Mapping) or not logs.get("prompt"):
            return
        prompts, completions = list(logs["prompt"]), list(logs.get("completion", ()))
        advantages = list(logs.get("advantages", ()))
        rewards = {str(name): list(values) for name, values in (logs.get("rewards") or {}).items()}
        fingerprint = hash((repr(prompts), repr(completions), repr(advantages)))
        if fingerprint == self._last_completions:
            return
        self._last_completions = fingerprint
        samples = [
            {"prompt": prompt, "completion": completion,
             "rewards": {name: values[index] for name, values in rewards.items() if index < len(values)},
             "advantage": advantages[index] if index < len(advantages) else None}
            for index, (prompt, completion) in enumerate(zip(prompts, completions, strict=False))
        ]
        self.run.log_samples(samples, step)

    def _training_raised(self, error: BaseException) -> None:
        if self.run is None or self.run.finished:
            return
        if isinstance(error, KeyboardInterrupt):
            self._end_run("canceled", "interrupted (KeyboardInterrupt)")
        else:
            self._end_run("failed", f"{type(error).__name__}: {error}")

    def _at_exit(self) -> None:
        if self.run is None or self.run.finished:
            return
        crash = getattr(sys, "last_value", None)  # set by Python when the program ends on an uncaught exception
        if self._training_ended and crash is not None:
            self._end_run("failed", f"the program ended on {type(crash).__name__}: {crash} (after training ended)",
                          timeout=EXIT_FINISH_TIMEOUT)
        elif self._training_ended:
            self._end_run("succeeded", timeout=EXIT_FINISH_TIMEOUT)
        else:
            self._end_run("failed", "the training program ended before training finished (an exception outside "
                          "the training step, or the program was stopped)", timeout=EXIT_FINISH_TIMEOUT)

    def _end_run(self, status: str, error: str | None = None, *, timeout: float | None = None) -> None:
        atexit.unregister(self._at_exit)
        self.run.finish(status, error=error, timeout=self.finish_timeout if timeout is None else timeout)
        if self._owns_client:
            self.client.close()  # its kept-alive connection; a next train() opens a new one


def find_trainer(callback: TrainerCallback) -> Any:
    """The Trainer running `callback`: callbacks are not handed their trainer, so it is looked up on the call
    stack (on_train_begin is called from inside Trainer.train)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            candidate = frame.f_locals.get("self")
            handler = getattr(candidate, "callback_handler", None)
            if handler is not None and any(item is callback for item in getattr(handler, "callbacks", ())):
                return candidate
            frame = frame.f_back
        return None
    finally:
        del frame


def model_name(model: Any) -> str | None:
    config = getattr(model, "config", None)
    return getattr(config, "_name_or_path", None) or getattr(model, "name_or_path", None) or None


_WRAPPED = "_preflab_wrapped"


def _wrap_training_step(trainer: Any, on_error) -> None:
    _unwrap_training_step(trainer)
    original = trainer.training_step

    def training_step(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except BaseException as error:
            on_error(error)
            raise

    setattr(training_step, _WRAPPED, True)
    trainer.training_step = training_step  # an instance attribute: the class's method is untouched


def _unwrap_training_step(trainer: Any) -> None:
    if getattr(vars(trainer).get("training_step"), _WRAPPED, False):
        del trainer.training_step

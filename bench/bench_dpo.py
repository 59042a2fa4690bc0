"""DPO training throughput: trainer.algorithms.dpo against TRL's DPOTrainer, with a live frozen reference model on both
sides and with reference log-probs precomputed before training on both sides (the precompute itself is
outside the timed steps in both).

    python bench/bench_dpo.py [--steps 21 --batch-size 16 --hidden-size 64 --layers 2 --threads 1]
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

from trainer.algorithms.dpo import train
from trainer.kinds import config_from_dict

LR = 1e-6
BETA = 0.1


def run_ours(args, model_dir: Path, rows: list[dict], *, precompute: bool) -> float:
    output_dir = Path(scratch_dir("ours-dpo-"))
    fields = our_common_fields(args, model_dir, output_dir, LR)
    config = config_from_dict("dpo", {**fields, "beta": BETA, "loss_type": "sigmoid", "precompute_ref_logps": precompute})
    sink = TimingSink()
    train(config, rows, sink)
    return sink.timed_seconds()


def run_trl(args, model_dir: Path, rows: list[dict], *, precompute: bool) -> float:
    from trl import DPOConfig, DPOTrainer

    output_dir = Path(scratch_dir("trl-dpo-"))
    config = DPOConfig(
        **trl_common_args(args, output_dir, LR),
        beta=BETA,
        loss_type=["sigmoid"],
        precompute_ref_log_probs=precompute,
    )
    return timed_trl_training(DPOTrainer, model_dir, rows, config)


def main() -> None:
    args = parse_args(__doc__)
    model_dir, rows = bench_workspace(args)
    title = (
        f"DPO, hidden {args.hidden_size} x {args.layers} layers, level-{args.level} arithmetic, "
        f"batch {args.batch_size}, steps 2..{args.steps}"
    )
    pairs = (args.steps - 1) * args.batch_size
    for precompute, mode in ((False, "live reference"), (True, "precomputed reference")):
        trl_seconds = run_trl(args, model_dir, rows, precompute=precompute)
        our_seconds = run_ours(args, model_dir, rows, precompute=precompute)
        print_table(
            f"{title}, {mode}",
            pairs,
            [("TRL DPOTrainer", trl_seconds), ("ours (trainer.algorithms.dpo)", our_seconds)],
            trl_seconds,
        )


if __name__ == "__main__":
    main()

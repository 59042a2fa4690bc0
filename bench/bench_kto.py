"""KTO training throughput: trainer.algorithms.kto against TRL's KTOTrainer, the same tiny model, rows (the arithmetic
task's thumbs: each problem's correct completion up, a wrong one down), batch, lengths and learning rate, a live
frozen reference model on both sides (TRL's default; ours always, see trainer/algorithms/kto.py).

    python bench/bench_kto.py [--steps 21 --batch-size 16 --hidden-size 64 --layers 2 --threads 1]
"""

from __future__ import annotations

from pathlib import Path

import common

from trainer.algorithms.kto import train
from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict

LR = 1e-6
BETA = 0.1


def run_ours(args, model_dir: Path, rows: list[dict]) -> float:
    output_dir = Path(common.scratch_dir("ours-kto-"))
    config = config_from_dict("kto", {**common.our_common_fields(args, model_dir, output_dir, LR), "beta": BETA})
    sink = common.TimingSink()
    train(config, rows, sink)
    return sink.timed_seconds()


def run_trl(args, model_dir: Path, rows: list[dict]) -> float:
    from trl import KTOConfig, KTOTrainer

    output_dir = Path(common.scratch_dir("trl-kto-"))
    config = KTOConfig(**common.trl_common_args(args, output_dir, LR), beta=BETA, precompute_ref_log_probs=False)
    return common.timed_trl_training(KTOTrainer, model_dir, rows, config)


def main() -> None:
    args = common.parse_args(__doc__)
    model_dir, _ = common.bench_workspace(args)
    # half as many problems as rows: every row is seen once
    rows = [
        {key: row[key] for key in ("prompt", "completion", "label")}
        for row in arithmetic.thumbs_rows(args.level, "train", args.steps * args.batch_size // 2)
    ]
    title = (
        f"KTO, hidden {args.hidden_size} x {args.layers} layers, level-{args.level} arithmetic thumbs, "
        f"batch {args.batch_size}, steps 2..{args.steps}, live reference"
    )
    trl_seconds = run_trl(args, model_dir, rows)
    our_seconds = run_ours(args, model_dir, rows)
    common.print_table(
        title,
        (args.steps - 1) * args.batch_size,
        [("TRL KTOTrainer", trl_seconds), ("ours (trainer.algorithms.kto)", our_seconds)],
        trl_seconds,
        unit="rows",
    )


if __name__ == "__main__":
    main()

"""What is trained: the losses, log-probs of completions, held-out evaluation, the online rollout GRPO and PPO
share, and one module per run kind with `train(config, data, sink, *, eval_data=None)` (trainer/kinds.py lists
them)."""

"""Preflab's trainer: the algorithms and training loops. Imports torch/transformers, never Django.

Importing this package (and `trainer.config`, `trainer.rewards` registry names) must not import torch:
the web process reads configs and reward names from here and must stay small and fast to start.
"""

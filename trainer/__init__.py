"""Preflab's trainer: the algorithms and training loops. Imports torch/transformers, never Django.

Its folders are its layers, each importing only those below: formats/ (rows and texts), modeling/ (the model and
its forward), decoding/ (sampling), algorithms/ (losses and one module per run kind); at the top stand the
contract (config.py, kinds.py, loop.py, sink.py) and the command line (cli.py).

Importing this package (and `trainer.config`, `trainer.kinds`, `trainer.rewards` registry names) must not import
torch: the web process reads configs, kinds and reward names from here and must stay small and fast to start.
"""

"""Where the trainer's tensors live. Every tensor the trainer makes names its device (tested by
tests/trainer/test_device_placement.py): the device of the tensors it will meet (`like.device`, the model's),
or HOST for what is built from Python data on the CPU and moved in one copy later (collated batches, prompt ids)
or stays there (data order, row indices, seeded draws that must not depend on the device they are used on).
"""

from __future__ import annotations

import torch

HOST = torch.device("cpu")

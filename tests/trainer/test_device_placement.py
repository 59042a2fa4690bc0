"""Every tensor the trainer makes names its device, so none made on the CPU meets a GPU's.

A GPU run of GRPO and PPO once failed at its first step ("Expected all tensors to be on the same device"): the
rewards became a tensor on the CPU and met the log-probs on the GPU. On a CPU-only machine both sit on the CPU
and nothing fails, so two checks stand in for the GPU here:
- a reading of trainer/ and workers/ that finds every torch factory call naming no device (or the CPU by a
  literal "cpu" instead of trainer.devices.HOST, which says why it is the CPU);
- every run kind (GRPO under the dapo preset, PPO with its critic, evaluation, a resume from a checkpoint), a
  sampling job's generation and a suggestion job's reward model and judge run with our code's device-less factory
  calls making *meta* tensors, which cannot meet the model's: the failure a GPU shows, on the CPU. Where torch would
  let a meta operand meet a real one (an embedding of meta ids answers on the CPU), the mode refuses it.
"""

from __future__ import annotations

import ast
import importlib
import math
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from trainer.builtin_datasets import arithmetic
from trainer.kinds import config_from_dict
from trainer.sink import MemorySink

REPO = Path(__file__).resolve().parents[2]
CHECKED = (REPO / "trainer", REPO / "workers")
FACTORIES = frozenset({
    "tensor", "as_tensor", "asarray", "zeros", "ones", "full", "empty", "empty_strided", "arange", "linspace",
    "logspace", "rand", "randn", "randint", "randperm", "eye", "normal", "scalar_tensor", "tril_indices",
    "triu_indices", "Generator",
})
# no device argument: the array's memory is the CPU's, so torch.tensor(array, device=...) says where it goes
HOST_ONLY = frozenset({"from_numpy", "frombuffer"})


def device_less_factory_calls(root: Path, base: Path = REPO) -> list[str]:
    """`file:line: torch.<factory>` (the file relative to base) for each call under root naming no device or a
    literal "cpu"."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
                continue
            where = f"{path.relative_to(base)}:{node.lineno}: torch.{node.func.attr}"
            device = next((keyword.value for keyword in node.keywords if keyword.arg == "device"), None)
            if node.func.attr in HOST_ONLY:
                found.append(f"{where} (the CPU's memory: torch.tensor(..., device=...) instead)")
            elif node.func.attr in FACTORIES and device is None:
                found.append(f"{where} names no device")
            elif node.func.attr in FACTORIES and isinstance(device, ast.Constant) and device.value == "cpu":
                found.append(f'{where} names "cpu" (trainer.devices.HOST says why it is the CPU)')
    return found


def test_every_tensor_the_trainer_and_the_workers_make_names_its_device():
    found = [call for root in CHECKED for call in device_less_factory_calls(root)]
    assert not found, "tensors made without their device:\n" + "\n".join(found)


def test_the_reading_finds_a_device_less_call(tmp_path):
    (tmp_path / "made.py").write_text(
        "import torch\n"
        "a = torch.tensor([1.0])\n"
        "b = torch.zeros(2, device=x.device)\n"
        "c = torch.arange(3, device='cpu')\n"
        "d = torch.from_numpy(array)\n"
        "e = torch.ones(2, dtype=torch.long)\n"
    )
    found = device_less_factory_calls(tmp_path, base=tmp_path)
    assert [line.split(": ")[0] for line in found] == ["made.py:2", "made.py:4", "made.py:5", "made.py:6"]


class DeviceLessTensorsOnMeta(TorchFunctionMode):
    """Factory calls made from our code (trainer/, workers/) without a device make meta tensors: they cannot meet
    the model's tensors, be read (`.item()`, `.tolist()`) or be copied to a device, as a CPU tensor cannot meet a
    GPU's. Library code (torch, transformers) is left as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.roots = tuple(str(root) + "/" for root in CHECKED)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in FACTORIES and "device" not in kwargs and sys._getframe(1).f_code.co_filename.startswith(self.roots):
            kwargs = {**kwargs, "device": "meta"}
        elif name not in INDEXING:
            refuse_meta_meeting_a_real_tensor(name, args, kwargs)
        return func(*args, **kwargs)


# A CPU tensor may index a GPU tensor (t[cpu_ids]): no failure there on a GPU
INDEXING = frozenset({"__getitem__", "__setitem__"})


def refuse_meta_meeting_a_real_tensor(name: str, args: tuple, kwargs: dict) -> None:
    """Some operations take a meta operand beside a CPU one without complaint (an embedding looked up with meta ids
    answers on the CPU), where a GPU refuses a CPU operand: refuse them here as the GPU would. A 0-dim tensor may
    meet another device's on a GPU (a CPU scalar), so only tensors of one dimension or more count."""
    tensors = [leaf for leaf in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
    if any(t.is_meta and t.dim() > 0 for t in tensors) and any(not t.is_meta and t.dim() > 0 for t in tensors):
        raise RuntimeError(f"{name}: a tensor our code made without its device (meta here) met a tensor on "
                           f"{next(t.device for t in tensors if not t.is_meta)}: on a GPU, 'Expected all tensors to "
                           "be on the same device'")


def test_the_meta_mode_stands_in_for_a_gpu():
    """A CPU tensor made without its device cannot meet the model's: the failure GRPO had on the H200."""
    model_tensor = torch.ones(4)
    namespace = {"torch": torch, "logp": model_tensor}
    code = compile("rewards = torch.tensor([1.0, 2.0, 3.0, 4.0])\nloss = (rewards * logp).sum()", str(REPO / "trainer" / "x.py"), "exec")
    with DeviceLessTensorsOnMeta(), pytest.raises((RuntimeError, NotImplementedError)):
        exec(code, namespace)
    named = compile("rewards = torch.tensor([1.0, 2.0, 3.0, 4.0], device=logp.device)\nloss = (rewards * logp).sum()",
                    str(REPO / "trainer" / "x.py"), "exec")
    with DeviceLessTensorsOnMeta():
        exec(named, namespace)
    assert namespace["loss"].item() == 10.0
    # an embedding looked up with meta ids answers on the CPU unasked: refused, as a GPU refuses CPU ids
    lookup = compile("ids = torch.tensor([[1, 2]])\nout = torch.nn.functional.embedding(ids, weight)",
                     str(REPO / "trainer" / "x.py"), "exec")
    with DeviceLessTensorsOnMeta(), pytest.raises(RuntimeError, match="embedding: a tensor our code made without"):
        exec(lookup, {"torch": torch, "weight": torch.randn(4, 3)})


def _settings(kind: str, model: str, output_dir: Path, **overrides) -> dict:
    common = {
        "model": model, "output_dir": str(output_dir), "lr": 1e-3, "max_steps": 2, "batch_size": 4,
        "grad_accum_steps": 2, "max_length": 48, "max_prompt_length": 24,
    }
    online = {"max_new_tokens": 6, "rewards": {"answer_match": 1.0, "format_tags": 0.5}, "batch_size": 2}
    per_kind = {
        "sft": {"eval_max_new_tokens": 6},
        "reward_model": {},
        "dpo": {"eval_max_new_tokens": 6},
        "dpo-live-reference": {"precompute_ref_logps": False, "use_lora": True, "lora_r": 4, "lora_alpha": 8},
        "grpo": {**online, "group_size": 4, "num_iterations": 2},
        "grpo-dapo": {**online, "preset": "dapo", "group_size": 4, "max_generation_rounds": 2, "overlong_buffer": 2},
        "ppo": {**online, "grad_accum_steps": 1, "ppo_epochs": 2, "num_mini_batches": 2},
    }
    return {**common, **per_kind[kind], **overrides}


def _data(kind: str) -> tuple[list[dict], list[dict]]:
    if kind in ("reward_model", "dpo", "dpo-live-reference"):
        return arithmetic.preference_rows(1, "train", 16), arithmetic.preference_rows(1, "test", 4)
    return arithmetic.sft_rows(1, "train", 16), arithmetic.sft_rows(1, "test", 4)


def _train(kind: str, model: str, output_dir: Path, sink: MemorySink, **overrides):
    run_kind = kind.split("-")[0]
    config = config_from_dict(run_kind, _settings(kind, model, output_dir, **overrides))
    data, eval_data = _data(kind)
    return importlib.import_module(f"trainer.algorithms.{run_kind}").train(config, data, sink, eval_data=eval_data)


@pytest.mark.parametrize("kind", ["sft", "reward_model", "dpo", "dpo-live-reference", "grpo", "grpo-dapo", "ppo"])
def test_every_kind_trains_evaluates_and_resumes_without_a_device_less_tensor(kind, tiny_model, tmp_path):
    with DeviceLessTensorsOnMeta():
        first = _train(kind, tiny_model, tmp_path / "run", MemorySink(stop_at_step=1))
        resumed_sink = MemorySink()
        _train(kind, tiny_model, tmp_path / "run", resumed_sink, resume_from=first.checkpoint)
    assert first.stopped and first.step == 1
    assert set(resumed_sink.metrics) == {2}
    assert math.isfinite(resumed_sink.metrics[2]["loss"])


def test_a_sampling_jobs_generation_makes_no_device_less_tensor(tiny_model):
    from trainer.decoding.generation import HFGenerationBackend, SamplingParams
    from trainer.modeling.models import load_reference, load_tokenizer

    tokenizer = load_tokenizer(tiny_model)
    with DeviceLessTensorsOnMeta():
        # as workers/sampling.py samples: a frozen model, no seeds (draws from torch's generator on the device)
        backend = HFGenerationBackend(load_reference(tiny_model), tokenizer)
        samples = backend.generate(["1+1=", "2+3="], SamplingParams(group_size=3, max_new_tokens=5))
        seeded = backend.generate(["1+1="], SamplingParams(group_size=2, max_new_tokens=5), seeds=[7])
    assert samples.completion_ids.shape[0] == 6 and len(seeded.texts) == 2


def test_a_suggestion_jobs_reward_model_and_judge_make_no_device_less_tensor(tiny_model, tmp_path):
    """What a suggestion job runs on a GPU worker (workers/suggesting.py): a reward model's scores and a judge's
    probabilities, each with our code's device-less tensors on meta."""
    from trainer.algorithms.rollout import RewardModelScorer
    from trainer.judging import Comparison, Judge

    reward_model = _train("reward_model", tiny_model, tmp_path / "rm", MemorySink())
    prompts = ["Calculate 1 + 1\n", "Calculate 2 + 3\n", "Calculate 4 * 2\n"]
    completions = ["<answer>2</answer>", "<answer>6</answer>", "<answer>8</answer>"]
    with DeviceLessTensorsOnMeta():
        scores = RewardModelScorer(reward_model.checkpoint, batch_size=2)(prompts, completions)
        judge = Judge(tiny_model, batch_size=2)
        first = judge.prefer_first("Prefer the right answer.", [Comparison(p, c, "<answer>0</answer>")
                                                                for p, c in zip(prompts, completions, strict=True)])
    assert len(scores) == 3 and all(math.isfinite(score) for score in scores)
    assert len(first) == 3 and all(0.0 <= probability <= 1.0 for probability in first)

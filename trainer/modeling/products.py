"""A matrix product for the few rows of a decoding step, shared by the fast decoder and the fp32 output head."""

from __future__ import annotations

import functools
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

# Decoding multiplies a few rows by matrices that are read from memory once per token. Which way round the CPU
# streams a float32 weight faster depends on the CPU, because MKL (torch's float32 product) runs its tuned kernels
# only on Intel's: on an AMD EPYC weight @ x^T took 45 against 57 ms a decoding step for SmolLM2-135M's 211
# matrices at 16 rows, 2 threads, and sampling 16 x 64 tokens 4.3 s instead of 5.3; on an Intel Xeon the plain
# x @ weight^T is the faster (sampling 4.47 s against 4.93). Under bf16 the products are oneDNN's, and the fused
# decoder's weight @ x^T is the faster on the Xeon (3.03 s against 3.30).
WEIGHT_FIRST_MAX_ROWS = 64


@functools.cache
def weight_first_float32() -> bool:
    """Whether a few float32 rows are multiplied as weight @ x^T on this CPU: everywhere but on Intel CPUs."""
    return cpu_vendor() != "GenuineIntel"


def cpu_vendor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's vendor id ("GenuineIntel", "AuthenticAMD", ...); "" where the system does not say (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "vendor_id":
            return value.strip()
    return ""


def weight_first(x: Tensor, weight: Tensor) -> bool:
    """x [rows, in] times weight [out, in] is computed as weight @ x^T (see WEIGHT_FIRST_MAX_ROWS above)."""
    rows = x.numel() // x.shape[-1]
    if rows > WEIGHT_FIRST_MAX_ROWS or x.device.type != "cpu" or x.dtype != weight.dtype:
        return False
    return x.dtype != torch.float32 or weight_first_float32()


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """F.linear(x, weight, bias), as weight @ x^T where that is the faster way (few float32 rows on some CPUs)."""
    # bf16 products here are the unfused decoder's and autocast's, where the plain product is the faster
    if x.dtype != torch.float32 or torch.is_autocast_enabled("cpu") or not weight_first(x, weight):
        return F.linear(x, weight, bias)
    rows = x.numel() // x.shape[-1]
    product = torch.mm(weight, x.reshape(rows, x.shape[-1]).t()).t()
    if bias is not None:
        product = product + bias
    return product.reshape(*x.shape[:-1], product.shape[-1])

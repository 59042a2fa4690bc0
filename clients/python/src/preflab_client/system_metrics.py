"""System metrics on request (`init_run(..., system_metrics=True)`): every SYSTEM_METRICS_SECONDS a thread
samples the machine and this process and logs them as `system/...` metrics of the run:

- system/cpu_percent, system/ram_used_gb, system/ram_percent (the machine), system/process_cpu_percent,
  system/process_ram_gb (this process's resident memory): with psutil (`pip install 'preflab-client[system]'`);
- system/gpu{i}/memory_allocated_gb, system/gpu{i}/memory_reserved_gb: when torch is imported and sees CUDA;
- system/gpu{i}/utilization_percent: when pynvml is importable too.

A sample is logged at the latest step the run logged (0 before the first), merged into that step's row: system
metrics are charted against the training's steps like every other metric. torch is never imported here (only
used when the training program already imported it), so the sampler costs a training nothing it did not load.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from preflab_client.runs import ExternalRun

logger = logging.getLogger("preflab_client")

SYSTEM_METRICS_SECONDS = 10.0
GB = 1024**3


def cpu_and_ram(process: Any) -> dict[str, float]:
    """The machine's and `process`'s CPU and memory (psutil); {} without psutil."""
    try:
        import psutil
    except ImportError:
        return {}
    memory = psutil.virtual_memory()
    with process.oneshot():
        return {
            "system/cpu_percent": psutil.cpu_percent(interval=None),
            "system/ram_used_gb": (memory.total - memory.available) / GB,
            "system/ram_percent": memory.percent,
            "system/process_cpu_percent": process.cpu_percent(interval=None),
            "system/process_ram_gb": process.memory_info().rss / GB,
        }


def gpu_memory() -> dict[str, float]:
    """Per GPU, what torch's caching allocator of this process holds; {} when torch is not loaded or has no CUDA."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return {}
    metrics = {}
    for index in range(torch.cuda.device_count()):
        metrics[f"system/gpu{index}/memory_allocated_gb"] = torch.cuda.memory_allocated(index) / GB
        metrics[f"system/gpu{index}/memory_reserved_gb"] = torch.cuda.memory_reserved(index) / GB
    return metrics


def gpu_utilization() -> dict[str, float]:
    """Each GPU's utilisation as NVML reports it; {} without pynvml or a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return {f"system/gpu{index}/utilization_percent":
                float(pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(index)).gpu)
                for index in range(pynvml.nvmlDeviceGetCount())}
    except Exception:  # no pynvml, no driver, no GPU
        return {}


class SystemMetrics:
    """The sampling thread of one run; `stop()` ends it (the run's finish() does)."""

    def __init__(self, run: ExternalRun, seconds: float = SYSTEM_METRICS_SECONDS) -> None:
        if seconds <= 0:
            raise ValueError(f"system_metrics: the seconds between samples must be > 0, got {seconds!r}")
        self.run = run
        self.seconds = seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name=f"preflab-system-{run.id}", daemon=True)
        self._process: Any = None
        try:
            import psutil

            self._process = psutil.Process()
            self._process.cpu_percent(interval=None)  # the first call starts psutil's CPU clock
            psutil.cpu_percent(interval=None)
        except ImportError:
            logger.warning("preflab: system metrics without psutil: no CPU or RAM figures (pip install "
                           "'preflab-client[system]')")

    def start(self) -> SystemMetrics:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)

    def sample(self) -> dict[str, float]:
        metrics = cpu_and_ram(self._process) if self._process is not None else {}
        metrics.update(gpu_memory())
        metrics.update(gpu_utilization())
        return metrics

    def _work(self) -> None:
        while not self._stop.wait(self.seconds):
            try:
                metrics = self.sample()
                if metrics and not self.run.finished:
                    self.run.log(metrics, step=self.run.latest_step)
            except Exception as error:  # the sampler must never take the training down
                logger.warning("preflab: system metrics of run %d: %s", self.run.id, error)

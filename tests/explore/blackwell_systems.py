"""The Blackwell and Hopper presets and their kernel models, shared by the kernel tests
(test_blackwell_kernels.py, test_cudnn_versions.py)."""

from __future__ import annotations

from stage_explore.system import load_system
from stage_explore.system.accelerator import KernelModel

B200 = load_system("b200")
GB200 = load_system("gb200-nvl72")
H100 = load_system("h100-80gb")


def kernels_of(system: object) -> KernelModel:
    """The accelerator's kernel model of a loaded system."""
    kernels = system.accelerator.kernels  # type: ignore[attr-defined]
    assert isinstance(kernels, KernelModel)
    return kernels

"""s37 optim2: the optimizer's kind (``optimizer``, :mod:`stage_core.lower.optimizer_kinds`)
beyond the levelled analytical step — the ``stage trace`` programs' optimizer node, the CPU step
under ``offload_optimizer`` and PyTorch's foreach SGD under ``optimizer_foreach``, each against
figures written out here. The trace mode's and the lowering's equality with the levelled mode is
in ``test_backend_contract.py``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from stage_core.chakra.reader import read_trace_set
from stage_core.errors import ConfigError
from stage_core.lower.program import make_workload
from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.costs import foreach_optimizer_bytes, optimizer_step_s
from stage_explore.analytical.frameworks import get_framework
from stage_explore.analytical.offload import (
    CPU_OPTIMIZER_PARAMS_PER_S,
    check_offload,
    cpu_step_scale,
    offload_step_s,
)
from stage_explore.cli import main
from stage_explore.system import load_system

RUN = ["--model", "llama3-8b", "--layers", "2", "--seq-len", "1024", "--dp", "2", "--tp", "2",
       "--global-batch", "4", "--quiet"]  # fmt: skip
P = 4  # fp32 parameter and momentum buffer


def _optimizer_nodes(out: Path, *extra: str) -> list[tuple[int, int]]:
    assert main(["trace", *RUN, *extra, "--out", str(out)]) == 0
    return [
        (node.flops, node.tensor_bytes)
        for _, nodes in sorted(read_trace_set(out).ranks.items())
        for node in nodes
        if "optimizer" in node.name
    ]


def test_stage_trace_writes_the_kinds_optimizer_node(tmp_path: Path) -> None:
    adam = _optimizer_nodes(tmp_path / "adam")
    sgd = _optimizer_nodes(tmp_path / "sgd", "--optimizer", "sgd")
    assert len(adam) == len(sgd) == 4  # one per rank
    for (adam_flops, adam_bytes), (flops, moved) in zip(adam, sgd, strict=True):
        params = adam_flops // 12
        assert adam_flops == 12 * params and adam_bytes == 30 * params  # 16 read, 14 written
        assert (flops, moved) == (2 * params, 14 * params)  # 8 read, 6 written


def test_stage_trace_refuses_an_unknown_optimizer(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["trace", *RUN, "--optimizer", "lamb", "--out", str(tmp_path)])


@pytest.mark.parametrize("grad_bytes", [2, 4])
def test_foreach_sgd_bytes_are_the_passes_of_the_code(grad_bytes: int) -> None:
    g, clip = grad_bytes, 3 * grad_bytes  # clip_grad_norm_: the norms read g, mul_ reads/writes g
    plain = (2 * P + g) + clip  # _foreach_add_(params, grads): read p and g, write p
    # _foreach_mul_(bufs); _foreach_add_(bufs, grads); _foreach_add_(params, bufs)
    momentum = 2 * P + (2 * P + g) + 3 * P + clip
    assert foreach_optimizer_bytes(g, "sgd") == plain
    assert foreach_optimizer_bytes(g, "sgd_momentum") == momentum
    assert (foreach_optimizer_bytes(4, "sgd"), foreach_optimizer_bytes(4, "sgd_momentum")) == (
        24,
        44,
    )
    with pytest.raises(ConfigError, match="adam_bf16_moments"):
        foreach_optimizer_bytes(g, "adam_bf16_moments")


def test_the_foreach_sgd_step_is_memory_bound_on_those_bytes() -> None:
    accelerator = load_system("h100-80gb").accelerator
    params = 10**9
    bandwidth = accelerator.memory_bandwidth_bytes_per_s * accelerator.efficiency.memory
    step = optimizer_step_s(accelerator, "bf16", params, 4, foreach=True, kind="sgd")
    assert step == pytest.approx(24 * params / bandwidth)
    fused = optimizer_step_s(accelerator, "bf16", params, 4, foreach=True, kind="adam_bf16_moments")
    assert fused == optimizer_step_s(accelerator, "bf16", params, 4, kind="adam_bf16_moments")


SYSTEM = load_system("a100-80gb")
WORKLOAD = make_workload(
    get_flavor("megatron-gpt-1.7b").with_overrides(layers=2), ParallelConfig(dp=8, zero=3)
)
TORCH_OFFLOAD = replace(
    get_framework("fsdp"), offload_optimizer=True, offload_params=True, cpu_optimizer="torch"
)


@pytest.mark.parametrize(
    ("kind", "moved"), [("adam", 30), ("adam_bf16_moments", 22), ("sgd_momentum", 22), ("sgd", 14)]
)
def test_the_offloaded_cpu_step_follows_the_kinds_bytes(kind: str, moved: int) -> None:
    profile = replace(TORCH_OFFLOAD, optimizer=kind)
    assert cpu_step_scale(profile) == moved / 30
    params = 10**9
    cpu = params * SYSTEM.network[0].size / CPU_OPTIMIZER_PARAMS_PER_S["torch"]
    # offload_params: no H2D copy back; zero 3: no D2H copy in the step
    assert offload_step_s(profile, WORKLOAD, SYSTEM, params) == pytest.approx(cpu * moved / 30)


def test_deepspeeds_cpu_optimizer_does_not_step_sgd() -> None:
    profile = replace(TORCH_OFFLOAD, optimizer="sgd", cpu_optimizer="deepspeed")
    with pytest.raises(ConfigError, match="cpu_optimizer 'torch'"):
        check_offload(profile, WORKLOAD, SYSTEM)
    check_offload(replace(profile, cpu_optimizer="torch"), WORKLOAD, SYSTEM)

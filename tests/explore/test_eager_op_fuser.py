"""s28 gptoss20: under Transformer Engine's operation fuser (Megatron-Core's
``use_transformer_engine_op_fuser``, the profile's ``moe_grouped_kernel``) ``TEGroupedMLP`` runs
its experts as TE ops (``_fused_forward``: grouped linear with biases, ``ScaledClampedQGeGLU``,
grouped linear with biases), so neither ``_apply_bias``'s per-expert eager loop nor GPT-OSS's
eager GLU clamp is charged (:mod:`stage_explore.analytical.eager_megatron`)."""

from __future__ import annotations

import pytest

from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical import eager_megatron
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.eager import (
    eager_expert_kernels,
    eager_extra_bytes,
    eager_op_bytes,
)
from stage_explore.system import load_system

B200 = load_system("b200")
GPTOSS = get_flavor("gpt-oss-20b").with_overrides(layers=2, seq_len=1024)  # biased, clamped
EP1 = ParallelConfig(dp=8, ep=1, micro_batch=1, global_batch=8, precision="fp8", fp8_recipe="mxfp8")


def test_the_fused_experts_drop_the_eager_down_bias_and_keep_the_fc1_epilogue() -> None:
    eager = eager_op_bytes(GPTOSS, "megatron-core", fused=True)
    fused = eager_op_bytes(GPTOSS, "megatron-core", fused=True, op_fuser=True)
    assert eager["experts.fc2"] > 0 and eager["experts.fc2.backward"] > 0
    assert "experts.fc2" not in fused and "experts.fc2.backward" not in fused
    assert fused == {k: v for k, v in eager.items() if not k.startswith("experts.fc2")}


def test_the_fused_experts_drop_the_clamp_and_the_per_expert_launches() -> None:
    assert eager_extra_bytes(GPTOSS, "megatron-core")  # the eager path clamps
    assert eager_extra_bytes(GPTOSS, "megatron-core", op_fuser=True) == {}
    assert eager_expert_kernels(GPTOSS, "megatron-core", 32)["experts.fc2"] > 0
    assert eager_expert_kernels(GPTOSS, "megatron-core", 32, op_fuser=True) == {}


def _step(model: ModelSpec, **options: object) -> float:
    backend = AnalyticalBackend(framework="megatron-core", overrides=options)
    return backend.evaluate(model, EP1, B200).step_time_s


@pytest.mark.parametrize("name", ["CLAMPED_GLU_FAMILIES", "_EAGER_BIAS_OPS"])
def test_only_the_eager_path_charges_the_clamp_and_the_bias_loop(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    eager, fused = _step(GPTOSS), _step(GPTOSS, moe_grouped_kernel=True)
    monkeypatch.setattr(eager_megatron, name, ())
    assert _step(GPTOSS) < eager  # a fresh backend: no memo holds the charged timing
    assert _step(GPTOSS, moe_grouped_kernel=True) == fused  # nothing of it was charged

"""The reader of CPU offload (:mod:`stage_explore.validation.infer_offload`, s34 offload):
what a row names is read into the backend's offload options, or refused by the part that is not
modelled, in one line."""

from __future__ import annotations

import pytest

from stage_explore.validation.infer_errors import Uninferable
from stage_explore.validation.infer_offload import (
    check_offload_setup,
    named_offload,
    strip_offload,
)
from tests.explore.infer_helpers import synthetic_case

#: A DeepSpeed / FSDP job on 64 A100 80GB, all data parallel; each test replaces cells.
ROW = {
    "id": "OFFLOAD-TEST", "source": "DeepSpeed", "model": "Llama 2 7B",
    "gpu": "A100 SXM4 80GB", "num_gpus": "64", "tp": "1", "pp": "1", "dp": "64",
    "seq_len": "4096", "global_batch_seqs": "128", "micro_batch": "2", "precision": "bf16",
    "interconnect": "8x 200 Gb/s InfiniBand per node", "tokens_per_s_per_gpu": "1000",
}  # fmt: skip


@pytest.mark.parametrize(
    ("row", "framework", "said"),
    [({"source_table": "Parameters CPU Offloading, Activations CPU Offloading"}, "fsdp",
      "activation offload to host memory is not modelled"),
     ({"dp_sharding": "FSDP with activation offloading"}, "fsdp", "activation offload"),
     ({"dp_sharding": "ZeRO-3, offload to NVMe"}, "deepspeed", "offload to NVMe"),
     ({"source": "DeepSpeed ZeRO-Infinity"}, "deepspeed", "offload to NVMe"),
     ({"dp_sharding": "ZeRO-3 with offload"}, "deepspeed", "DeepSpeed offload is not modelled"),
     ({"dp_sharding": "ZeRO-3, parameter offload"}, "deepspeed",
      "parameter offload without optimizer offload"),
     ({"source": "torchtitan with CPU offload"}, "torchtitan", "under the torchtitan profile"),
     ({"source": "Megatron-Core, optimizer CPU offload"}, "megatron-core",
      "under the megatron-core profile")],
)  # fmt: skip
def test_what_is_not_modelled_is_refused_by_name(
    row: dict[str, str], framework: str, said: str
) -> None:
    with pytest.raises(Uninferable, match=said) as error:
        named_offload(row, framework)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("row", "framework", "options"),
    [({"dp_sharding": "ZeRO-Offload"}, "deepspeed", {"offload_optimizer": True}),
     ({"source": "ZeRO-3 with offload_optimizer and offload_param"}, "deepspeed",
      {"offload_optimizer": True, "offload_params": True}),
     ({"source": "PyTorch FSDP, parameters CPU offload"}, "fsdp",
      {"offload_optimizer": True, "offload_params": True}),
     ({"source": "DeepSpeed ZeRO-2"}, "deepspeed", {}),
     ({"source": "FSDP, CPU offload: False"}, "fsdp", {})],
)  # fmt: skip
def test_what_is_modelled_sets_the_options(
    row: dict[str, str], framework: str, options: dict[str, bool]
) -> None:
    assert named_offload(row, framework)[0] == options


@pytest.mark.parametrize(
    ("options", "zero", "system", "said"),
    [({"offload_optimizer": True, "offload_params": True}, 2, "a100-80gb", "needs ZeRO-3"),
     ({"offload_optimizer": True}, 0, "a100-80gb", "needs ZeRO >= 1"),
     ({"offload_optimizer": True}, 2, "mi300x", "no cited host-device bandwidth")],
)  # fmt: skip
def test_a_setup_the_offload_does_not_run_with_is_refused(
    options: dict[str, bool], zero: int, system: str, said: str
) -> None:
    with pytest.raises(Uninferable, match=said):
        check_offload_setup(options, zero, system)


def test_a_bare_zero_offload_cell_runs_zero_2_and_the_stage_stated_beside_offload_is_read() -> None:
    assert strip_offload("ZeRO-Offload")[1]
    assert not strip_offload("ZeRO-3 + CPU offload")[1]
    case = synthetic_case(ROW, "offload.csv", dp_sharding="ZeRO-Offload")
    assert not case.reason, case.reason
    assert case.parallel is not None and case.parallel.zero == 2
    assert dict(case.framework_options)["offload_optimizer"] is True
    assert any("DeepSpeedCPUAdam" in a for a in case.assumptions)
    fsdp = synthetic_case(ROW, "offload.csv", source="PyTorch FSDP with CPU offload")
    assert not fsdp.reason, fsdp.reason
    assert fsdp.parallel is not None and fsdp.parallel.zero == 3


def test_an_offloading_row_on_a_gpu_without_a_cited_bandwidth_is_refused() -> None:
    case = synthetic_case(ROW, "offload.csv", dp_sharding="ZeRO-Offload", gpu="MI300X")
    assert "no cited host-device bandwidth" in case.reason

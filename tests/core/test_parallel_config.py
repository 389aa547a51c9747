"""ParallelConfig: every rule with its message, valid published configs, derived sizes, meshes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.models import Activation, Family, ModelSpec, Norm, Position, get_flavor
from stage_core.parallel import (
    DEFAULT_GRAD_BUCKET_BYTES,
    EXPERT_DP_AXIS,
    CpStyle,
    ParallelConfig,
    PipelineSplit,
    Precision,
    Recompute,
    Schedule,
    pad_vocab,
)


def model(**changes: Any) -> ModelSpec:
    """A small GQA model whose dims each rule can break one at a time."""
    values: dict[str, Any] = dict(
        name="small",
        family=Family.LLAMA,
        layers=12,
        hidden=768,
        ffn=2048,
        heads=12,
        kv_heads=4,
        vocab=1000,
        seq_len=1024,
        norm=Norm.RMSNORM,
        activation=Activation.SWIGLU,
        position=Position.ROTARY,
    )
    values.update(changes)
    return ModelSpec(**values)


def moe(**changes: Any) -> ModelSpec:
    return model(**{"num_experts": 8, "top_k": 2, "expert_ffn": 512, **changes})


def test_defaults() -> None:
    config = ParallelConfig()
    assert (config.dp, config.tp, config.cp, config.pp, config.ep, config.vpp) == (1,) * 6
    assert (config.sp, config.zero, config.micro_batch, config.global_batch) == (False, 0, 1, 1)
    assert config.schedule is Schedule.ONE_F_ONE_B and config.recompute is Recompute.NONE
    assert config.cp_style is CpStyle.ALLGATHER and config.precision is Precision.BF16
    assert config.axis_order == ("pp", "dp", "ep", "cp", "tp")
    assert config.grad_bucket_bytes == DEFAULT_GRAD_BUCKET_BYTES == 26214400
    assert config.master_weights_fp32 and config.seq_len is None and config.dropout is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dp": 0}, "`dp` must be a positive int, but got dp=0"),
        ({"tp": -2}, "`tp` must be a positive int, but got tp=-2"),
        ({"cp": 1.5}, "`cp` must be a positive int, but got cp=1.5"),
        ({"pp": True}, "`pp` must be a positive int, but got pp=True"),
        ({"ep": 0}, "`ep` must be a positive int, but got ep=0"),
        ({"vpp": 0}, "`vpp` must be a positive int, but got vpp=0"),
        ({"micro_batch": 0}, "`micro_batch` must be a positive int, but got micro_batch=0"),
        ({"grad_bucket_bytes": 0}, "`grad_bucket_bytes` must be a positive int"),
        ({"vocab_divisible_by": 0}, "`vocab_divisible_by` must be a positive int"),
        ({"global_batch": -8}, "`global_batch` must be a positive int (0 = dp·micro_batch), but"),
        ({"seq_len": 0}, "`seq_len` must be a positive int or None, but got seq_len=0"),
        ({"etp": 0}, "`etp` must be a positive int or None (= tp), but got etp=0"),
        ({"dp_shard": True}, "`dp_shard` must be a positive int or None (= dp), but got"),
        ({"recompute_num_layers": 0}, "`recompute_num_layers` must be a positive int or None, "),
        (
            {"microbatch_group_size_per_vp_stage": -1},
            "`microbatch_group_size_per_vp_stage` must be a positive int or None, but got",
        ),
        ({"sp": "yes"}, "`sp` must be a bool, but got sp='yes'"),
        ({"master_weights_fp32": 1}, "`master_weights_fp32` must be a bool"),
        ({"dropout": "no"}, "`dropout` must be a bool or None, but got dropout='no'"),
        ({"zero": 4}, "`zero` must be 0, 1, 2, 3 or 'fsdp', but got zero=4"),
        ({"zero": "zero3"}, "`zero` must be 0, 1, 2, 3 or 'fsdp', but got zero='zero3'"),
        ({"cp_style": "ulysses"}, "`cp_style` must be one of 'allgather', 'ring', but got"),
        ({"schedule": "zigzag"}, "`schedule` must be one of 'gpipe', '1f1b', 'interleaved', 'zb'"),
        ({"schedule": "dualpipe", "pp": 3, "global_batch": 6}, "schedule='dualpipe' needs an even"),
        ({"schedule": "dualpipe", "pp": 4, "global_batch": 6}, "of at least 2·`pp`, but got"),
        ({"recompute": "partial"}, "`recompute` must be one of 'none', 'selective', 'full'"),
        ({"precision": "fp32"}, "`precision` must be one of 'bf16', 'fp16', 'fp8'"),
        (
            {"axis_order": ("pp", "dp", "cp", "ep", "tp"), "ep": 2},
            "with dp, ep and cp adjacent and ep",
        ),
        (
            {"axis_order": ("pp", "ep", "dp", "cp", "tp"), "ep": 2},
            "right after dp (`ep` > 1), but got axis_order=",
        ),
        ({"axis_order": ("pp", "dp", "ep", "tp", "cp"), "ep": 2}, "`axis_order` must order"),
        ({"axis_order": ("pp", "dp", "ep", "cp")}, "`axis_order` must order"),
        ({"axis_order": ("pp", "dp", "ep", "cp", "cp")}, "`axis_order` must order"),
        ({"axis_order": "pp,dp,ep,cp,tp"}, "`axis_order` must order"),
        (
            {"dp": 2, "micro_batch": 2, "global_batch": 6},
            "`micro_batch`·`dp` must divide `global_batch`, but got "
            "(global_batch=6, micro_batch=2, dp=2)",
        ),
        ({"vpp": 2, "pp": 2}, "`vpp` > 1 needs schedule='interleaved', but got (vpp=2, schedule="),
        ({"schedule": "interleaved"}, "schedule='interleaved' needs `pp` > 1, but got (pp=1)"),
        (
            {"schedule": "interleaved", "pp": 4, "vpp": 2, "global_batch": 6},
            "needs `pp` to divide the number of micro-batches (global_batch/(micro_batch·dp)), "
            "but got (num_micro_batches=6, pp=4)",
        ),
        (
            {"dp": 2, "cp": 2, "ep": 8},
            "`ep`·`etp` must divide `tp`·`dp`·`cp` (expert layers refold the same ranks, "
            "Megatron-Core's MoE parallel folding), but got (ep=8, etp=1, tp=1, dp=2, cp=2)",
        ),
        ({"pp_split": "middle"}, "`pp_split` must be one of 'auto', 'even', 'ends', 'embedding'"),
        ({"pp_layers": (3, -1)}, "`pp_layers` must be a list of non-negative ints, but got"),
        ({"pp_layers": "3,3"}, "`pp_layers` must be a list of non-negative ints, but got"),
        ({"pp_first_layers": 1.5}, "`pp_first_layers` must be a non-negative int or None"),
        (
            {"pp": 2, "pp_layers": (3, 3), "pp_last_layers": 3},
            "give either `pp_layers` or `pp_first_layers`/`pp_last_layers`, not both",
        ),
        (
            {"pp": 2, "pp_first_layers": 3, "pp_split": "embedding"},
            "pp_split='embedding' cannot be combined with explicit stage layer counts",
        ),
        ({"pp_last_layers": 3}, "`pp_first_layers`/`pp_last_layers` need `pp` > 1, but got (pp=1)"),
    ],
)
def test_invalid_configs_are_rejected_on_construction(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        ParallelConfig(**fields)


def test_construction_reports_every_problem_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        ParallelConfig(dp=0, tp=0, precision="fp2")  # type: ignore[arg-type]
    message = str(caught.value)
    assert "`dp` must" in message and "`tp` must" in message and "`precision` must" in message


@pytest.mark.parametrize(
    ("fields", "spec", "message"),
    [
        ({"tp": 8}, model(), "`tp` must divide `heads`, but got (tp=8, heads=12)"),
        (
            {"tp": 6},
            model(),
            "`tp` must divide `kv_heads`, or `kv_heads` divide `tp` (KV heads replicated), "
            "but got (tp=6, kv_heads=4)",
        ),
        ({"tp": 4}, model(ffn=2050), "`tp` must divide `ffn`, but got (tp=4, ffn=2050)"),
        (
            {"tp": 4},
            moe(expert_ffn=510),
            "`etp` (expert tensor parallel size) must divide `expert_ffn`, "
            "but got (etp=4, expert_ffn=510)",
        ),
        (
            {"pp": 8, "pp_split": "even"},
            model(),
            "`pp`·`vpp` must divide `layers` for an even pipeline split, but got (layers=12, "
            "pp·vpp=8)",
        ),
        (
            {"pp": 4, "vpp": 2, "schedule": "interleaved", "global_batch": 4, "pp_split": "even"},
            model(layers=10),
            "`pp`·`vpp` must divide `layers` for an even pipeline split, but got (layers=10, "
            "pp·vpp=8)",
        ),
        (
            {"pp": 4, "pp_layers": (3, 3, 3, 2)},
            model(),
            "`pp_layers` must add up to the model's layers, but got pp_layers=[3, 3, 3, 2] "
            "(sum 11) with layers=12",
        ),
        (
            {"pp": 4, "pp_layers": (4, 4, 4)},
            model(),
            "`pp_layers` must list one count per pipeline stage (pp=4) or per model chunk "
            "(pp·vpp=4), but got 3 counts: [4, 4, 4]",
        ),
        (
            {"pp": 4, "pp_layers": (8, 8, 8)},
            model(),
            "`pp_layers` must list one count per pipeline stage (pp=4) or per model chunk "
            "(pp·vpp=4), but got 3 counts: [8, 8, 8]; they also add up to 24, not the model's "
            "12 layers",
        ),
        (
            {"pp": 4, "pp_layers": (6, 0, 3, 3)},
            model(),
            "every pipeline stage but the first and the last",
        ),
        (
            {
                "pp": 4,
                "vpp": 2,
                "schedule": "interleaved",
                "global_batch": 4,
                "pp_layers": (3, 3, 3, 3),
            },
            model(),
            "with `vpp`=2 every pipeline rank's layer count must divide by vpp (Megatron), "
            "but pp_layers=[3, 3, 3, 3] gives [3, 3, 3, 3]",
        ),
        (
            {"pp": 4, "pp_first_layers": 2},
            model(),
            "the first/last-stage layer counts must leave a number of layers that the other "
            "pipeline stages share equally (Megatron), but got (first=2, last=None, layers=12, "
            "pp=4)",
        ),
        (
            {"pp": 4, "pp_split": "embedding-loss"},
            model(),
            "counting the embedding and loss as layers needs `pp`·`vpp` to divide 14 "
            "(layers=12 + 2), but got pp·vpp=4",
        ),
        ({"dp": 2, "ep": 2}, model(), "`ep` > 1 needs an MoE model, but got (ep=2, num_experts=0)"),
        (
            {"dp": 16, "ep": 16},
            moe(),
            "`ep` must divide `num_experts`, but got (ep=16, num_experts=8)",
        ),
        (
            {"cp": 4},
            model(seq_len=1028),
            "2·`cp` must divide `seq_len` (causal load balancing splits it in 2·cp chunks), "
            "but got (cp=4, seq_len=1028)",
        ),
        (
            {"cp": 2, "cp_style": "ring", "seq_len": 1026},
            model(),
            "2·`cp` must divide `seq_len`",
        ),
        (
            {"tp": 4, "sp": True},
            model(seq_len=1022),
            "`cp`·`tp` must divide `seq_len` with sequence parallelism, "
            "but got (cp=1, tp=4, seq_len=1022)",
        ),
        (
            {"seq_len": 4096},
            model(position=Position.LEARNED, max_position=2048),
            "learned positions need `seq_len` <= `max_position`",
        ),
    ],
)
def test_invalid_combinations_with_a_model(
    fields: dict[str, Any], spec: ModelSpec, message: str
) -> None:
    config = ParallelConfig(**fields)
    assert any(message in problem for problem in config.violations(spec))
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.validate(spec)


def test_validate_names_the_model_and_every_broken_rule() -> None:
    config = ParallelConfig(tp=8, pp=8, pp_split=PipelineSplit.EVEN)
    with pytest.raises(
        ConfigError, match=r"^invalid parallel config for model 'small': "
    ) as caught:
        config.validate(model(kv_heads=3))
    assert str(caught.value).count("; ") == 2  # heads, kv_heads, layers


@pytest.mark.parametrize(
    ("fields", "flavor"),
    [
        # Korthikanti et al. 2022 Table 5 runs (published_runs.csv KOR22-T5-*).
        (dict(tp=8, global_batch=4, micro_batch=4, sp=True), "megatron-gpt-22b"),
        (
            dict(tp=8, pp=8, vpp=3, schedule="interleaved", global_batch=64, sp=True),
            "megatron-gpt-175b",
        ),
        (
            dict(tp=8, pp=35, vpp=3, schedule="interleaved", global_batch=280, sp=True),
            "megatron-gpt-530b",
        ),
        (dict(tp=8, pp=64, global_batch=512, recompute="full"), "megatron-gpt-1t"),
        # Narayanan et al. 2021 Table 1 (micro-batch 1 assumed).
        (dict(tp=8, pp=64, dp=6, global_batch=3072), "megatron-gpt-1t"),
        (dict(tp=8, pp=35, dp=9, global_batch=2520), "megatron-gpt-530b"),
        (dict(tp=1, dp=32, global_batch=512), "megatron-gpt-1.7b"),
        # GQA, context parallelism, experts, MQA with replicated KV heads.
        (dict(tp=8, pp=4, cp=2, dp=4, sp=True, cp_style="ring", zero=1), "llama3-70b"),
        (dict(tp=16, pp=2, dp=2, sp=True), "llama3-70b"),
        (dict(dp=8, ep=8, tp=2, zero="fsdp"), "mixtral-8x7b"),
        (dict(dp=4, cp=2, ep=8), "mixtral-8x22b"),
        (dict(dp=16, ep=64, cp=4, pp=4), "deepseek-moe-16b"),
        (dict(tp=16, pp=2), "palm-540b"),
        (dict(sp=True), "gpt3-1.3b"),
    ],
)
def test_valid_configs_pass(fields: dict[str, Any], flavor: str) -> None:
    config = ParallelConfig(**fields)
    assert config.violations(get_flavor(flavor)) == ()
    config.validate(get_flavor(flavor))


def test_derived_sizes() -> None:
    config = ParallelConfig(dp=4, tp=8, cp=2, pp=4, ep=8, micro_batch=2, global_batch=64)
    assert config.world_size == 4 * 8 * 2 * 4
    assert config.num_micro_batches == 8
    assert config.expert_dp == 1
    assert ParallelConfig(dp=3, micro_batch=2).global_batch == 6


@pytest.mark.parametrize(
    ("tp", "sp", "expected"), [(1, True, False), (2, True, True), (2, False, False)]
)
def test_sequence_parallel_needs_tp(tp: int, sp: bool, expected: bool) -> None:
    assert ParallelConfig(tp=tp, sp=sp).sequence_parallel is expected


@pytest.mark.parametrize(
    ("vocab", "tp", "expected"),
    [
        (50257, 1, 50304),
        (50257, 8, 51200),
        (51200, 8, 51200),
        (128256, 8, 129024),
        (32000, 1, 32000),
    ],
)
def test_padded_vocab_is_a_multiple_of_128_tp(vocab: int, tp: int, expected: int) -> None:
    spec = model(vocab=vocab)
    assert ParallelConfig(tp=tp).padded_vocab(spec) == expected == pad_vocab(vocab, 128 * tp)
    assert ParallelConfig(tp=tp, vocab_divisible_by=1).padded_vocab(spec) == pad_vocab(vocab, tp)


@pytest.mark.parametrize(
    ("flavor", "tp", "expected"),
    [("llama3-70b", 8, 1), ("llama3-70b", 16, 2), ("palm-540b", 16, 16), ("gpt3-175b", 8, 1)],
)
def test_kv_replication(flavor: str, tp: int, expected: int) -> None:
    assert ParallelConfig(tp=tp).kv_replication(get_flavor(flavor)) == expected


def test_layers_per_chunk() -> None:
    config = ParallelConfig(pp=4, vpp=3, schedule=Schedule.INTERLEAVED, global_batch=8)
    assert config.layers_per_chunk(get_flavor("gpt3-175b")) == 8


def test_resolve_applies_seq_len_and_dropout_overrides() -> None:
    spec = get_flavor("gpt3-1.3b")
    resolved = ParallelConfig(seq_len=4096, dropout=False).resolve(spec)
    assert (resolved.seq_len, resolved.max_position, resolved.dropout) == (4096, 4096, False)
    assert ParallelConfig().resolve(spec) is spec
    assert ParallelConfig(seq_len=4096).sequence_length(spec) == 4096
    assert ParallelConfig().sequence_length(spec) == 2048


def test_zero_accepts_fsdp_alias() -> None:
    assert ParallelConfig(dp=2, zero="fsdp").zero == 3  # type: ignore[arg-type]
    # over one rank (dp·cp = 1) ZeRO-3 is ZeRO-0 (s30 review3, config.unsharded_zero)
    assert ParallelConfig(zero="fsdp").zero == 0  # type: ignore[arg-type]
    assert ParallelConfig(schedule="gpipe").schedule is Schedule.GPIPE  # type: ignore[arg-type]


def _data_index(coords: dict[str, int], sizes: dict[str, int], axes: tuple[str, ...]) -> int:
    index = 0
    for axis in axes:
        index = index * sizes[axis] + coords[axis]
    return index


@pytest.mark.parametrize(
    "fields",
    [
        dict(dp=4, cp=2, ep=4, tp=2, pp=2),
        dict(dp=2, cp=4, ep=8, tp=1, pp=1),
        dict(dp=6, cp=1, ep=3, tp=2, pp=1),
        dict(dp=2, cp=3, ep=6, tp=2, pp=2, axis_order=("tp", "pp", "cp", "dp", "ep")),
    ],
)
def test_expert_mesh_folds_dp_and_cp(fields: dict[str, Any]) -> None:
    config = ParallelConfig(**fields)
    dense, expert = config.mesh(), config.expert_mesh()
    assert dense.names == tuple(name for name in config.axis_order if name != "ep")
    assert expert.world_size == dense.world_size == config.world_size
    dense_data = tuple(name for name in dense.names if name in ("dp", "cp"))
    dense_sizes = {name: int(dense.size(name)) for name in dense.names}
    expert_sizes = {name: int(expert.size(name)) for name in expert.names}
    for rank in range(config.world_size):
        d, e = dense.coordinates(rank), expert.coordinates(rank)
        assert (d["pp"], d["tp"]) == (e["pp"], e["tp"])
        flat_dense = _data_index(d, dense_sizes, dense_data)
        assert flat_dense == _data_index(e, expert_sizes, (EXPERT_DP_AXIS, "ep"))
        for peer in expert.group(rank, ["ep"]):
            peer_coords = dense.coordinates(peer)
            assert (peer_coords["pp"], peer_coords["tp"]) == (d["pp"], d["tp"])


def test_default_mesh_puts_tp_innermost() -> None:
    config = ParallelConfig(dp=2, tp=4, cp=2, pp=2)
    mesh = config.mesh()
    assert mesh.names == ("pp", "dp", "cp", "tp")
    assert mesh.group(0, ["tp"]) == (0, 1, 2, 3)
    assert mesh.group(0, ["cp"]) == (0, 4)
    assert str(config.expert_mesh()) == "{pp=2, edp=4, ep=1, tp=4}"


def test_to_dict_is_plain_and_round_trips() -> None:
    config = ParallelConfig(
        dp=2, tp=2, sp=True, zero=1, schedule=Schedule.GPIPE, recompute=Recompute.FULL
    )
    values = config.to_dict()
    assert values["schedule"] == "gpipe" and type(values["schedule"]) is str
    assert values["axis_order"] == ["pp", "dp", "ep", "cp", "tp"]
    assert ParallelConfig(**values) == config


def test_config_is_frozen() -> None:
    with pytest.raises(AttributeError):
        ParallelConfig().tp = 2  # type: ignore[misc]


def test_a_dense_model_takes_megatrons_tp_pp_dp_rank_order() -> None:
    """NeMo's use_tp_pp_dp_mapping (Megatron-Core's order 'tp-cp-ep-pp-dp'): a dense model's
    mesh puts pp between cp and dp, so a data-parallel × context-parallel group is split by
    the pipeline stages (s23 mlperfaudit)."""
    config = ParallelConfig(dp=2, cp=2, pp=2, tp=2, global_batch=8,
                            axis_order=("dp", "pp", "ep", "cp", "tp"))  # fmt: skip
    config.validate(get_flavor("llama3-8b").with_overrides(layers=4, seq_len=256))
    mesh = config.mesh()
    assert mesh.names == ("dp", "pp", "cp", "tp")
    coords = [mesh.coordinates(rank) for rank in range(config.world_size)]
    data = [r for r, c in enumerate(coords) if (c["pp"], c["tp"]) == (0, 0)]
    stages = [r for r, c in enumerate(coords) if (c["dp"], c["cp"], c["tp"]) == (0, 0, 0)]
    assert (data, stages) == ([0, 2, 8, 10], [0, 4])  # rank = tp + 2·cp + 4·pp + 8·dp


def test_an_moe_model_needs_dp_ep_and_cp_adjacent_even_at_ep_1() -> None:
    config = ParallelConfig(dp=2, cp=1, pp=2, tp=1, global_batch=8,
                            axis_order=("dp", "pp", "ep", "cp", "tp"))  # fmt: skip
    with pytest.raises(ConfigError, match="expert layers refold the dp×cp ranks"):
        config.validate(get_flavor("mixtral-8x7b").with_overrides(layers=4, seq_len=256))

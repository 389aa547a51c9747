"""The workload options shared by every subcommand that takes a model and a parallel config.

Contents:

- :func:`add_model_options`: ``--model --layers --seq-len --dropout/--no-dropout``.
- :func:`add_parallel_options`: ``--dp --dp-shard --tp --cp --pp --ep --etp --moe-dispatcher
  --sp/--no-sp --zero --recompute --recompute-modules --recompute-num-layers
  --recompute-method --schedule --vpp --microbatch-group-size-per-virtual-pipeline-stage
  --micro-batch --global-batch
  --cp-style --precision --fp8-recipe --fp8-gemms``,
  and the pipeline split
  ``--pp-layout --pp-layers --pp-first-layers --pp-last-layers --pp-split``.
- :func:`parse_workload`: the parsed namespace as a validated ``(ModelSpec, ParallelConfig)``
  (with a stderr note when ``--zero`` 2/3 at ``dp·cp`` = 1 is run as ZeRO-0,
  :func:`~stage_core.parallel.unsharded_zero_note`).

Subcommands call all three, so the options are spelled, defaulted and checked the same way
everywhere. Every rule lives in :class:`~stage_core.parallel.ParallelConfig` and
:class:`~stage_core.models.ModelSpec`; nothing is checked here twice.
"""

from __future__ import annotations

import argparse
import sys

from stage_core.errors import ConfigError
from stage_core.models import ModelSpec, load_model
from stage_core.parallel import (
    FP8_GEMMS,
    RECOMPUTE_MODULES,
    CpStyle,
    Fp8Recipe,
    ParallelConfig,
    PipelineSplit,
    Precision,
    Recompute,
    Schedule,
    unsharded_zero_note,
)


def _choices(
    kind: type[CpStyle | Precision | Recompute | Schedule | PipelineSplit | Fp8Recipe],
) -> list[str]:
    return [member.value for member in kind]


def parse_pp_layers(text: str | None) -> tuple[int, ...]:
    """``"31,32,32,31"`` → ``(31, 32, 32, 31)``; a one-line :class:`ConfigError` otherwise."""
    if text is None:
        return ()
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or any(count < 0 for count in counts):
        raise ConfigError(
            "`--pp-layers` must be comma-separated non-negative layer counts, one per pipeline "
            f"stage (or per model chunk), e.g. 31,32,32,31, but got {text!r}"
        )
    return counts


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Add the model options to ``parser`` (in an argument group of their own)."""
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        required=True,
        metavar="FLAVOR_OR_FILE",
        help="a flavor name (e.g. llama3-70b), a model .toml file or a Hugging Face config.json",
    )
    group.add_argument(
        "--layers", type=int, default=None, help="override the number of layers (default: model's)"
    )
    group.add_argument(
        "--seq-len", type=int, default=None, help="training sequence length (default: model's)"
    )
    group.add_argument(
        "--mtp-layers",
        type=int,
        default=None,
        help="training: multi-token-prediction modules (DeepSeek-V3's D; default: model's, "
        "1 for deepseek-v3; serving runs the main model only)",
    )
    group.add_argument(
        "--dropout",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="force dropout on or off (default: model's)",
    )


def add_parallel_options(parser: argparse.ArgumentParser) -> None:
    """Add the parallel-configuration options to ``parser`` (in an argument group of their own)."""
    group = parser.add_argument_group("parallelism")
    for flag, what in (
        ("--dp", "data"),
        ("--tp", "tensor"),
        ("--cp", "context"),
        ("--pp", "pipeline"),
        ("--ep", "expert (folded over tp·cp·dp as Megatron-Core does)"),
    ):
        group.add_argument(flag, type=int, default=1, help=f"{what} parallel degree (default: 1)")
    group.add_argument(
        "--dp-shard",
        type=int,
        default=None,
        help="hybrid sharding (HSDP, FSDP's HYBRID_SHARD): the data-parallel ranks of a ZeRO "
        "shard group, a divisor of --dp; the dp/dp-shard replicas all-reduce their gradient "
        "shards (default: --dp, shard over all of dp; needs --zero >= 1)",
    )
    group.add_argument(
        "--etp",
        type=int,
        default=None,
        help="expert tensor parallel degree (Megatron's --expert-tensor-parallel-size; "
        "default: --tp; a divisor of --tp: the expert-parallel group folds over the other "
        "tp/etp ranks, e.g. --tp 4 --etp 2)",
    )
    group.add_argument(
        "--moe-dispatcher",
        choices=("alltoall", "allgather"),
        default="alltoall",
        help="MoE token dispatcher (Megatron's --moe-token-dispatcher-type): all-to-all of "
        "routed tokens (default), or all-gather over the expert group and reduce-scatter back",
    )
    group.add_argument(
        "--sp",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Megatron sequence parallelism (needs --tp > 1; Megatron turns it off at --tp 1)",
    )
    group.add_argument(
        "--zero",
        type=int,
        choices=(0, 1, 2, 3),
        default=0,
        help="ZeRO stage; 3 is FSDP (default: 0)",
    )
    group.add_argument(
        "--recompute",
        choices=_choices(Recompute),
        default=Recompute.NONE.value,
        help="activation recomputation (default: none)",
    )
    group.add_argument(
        "--recompute-modules",
        default="",
        metavar="MODULE,…",
        help="with --recompute selective: Megatron-Core's --recompute-modules, some of "
        f"{','.join(RECOMPUTE_MODULES)} (default core_attn; op: torchtitan's op-level "
        "selective checkpointing, alone)",
    )
    group.add_argument(
        "--recompute-num-layers",
        type=int,
        default=None,
        metavar="N",
        help="with --recompute full: Megatron-Core's --recompute-num-layers (partial "
        "checkpointing: the first N layers of each pipeline stage's model chunk recomputed)",
    )
    group.add_argument(
        "--recompute-method",
        default="block",
        metavar="METHOD",
        help="with --recompute-num-layers: block (Megatron-Core's --recompute-method block: the "
        "first N layers of each model chunk), every (torchtitan's selective_ac_option N: "
        "every N-th block), uniform (Megatron-Core's --recompute-method uniform: every layer, "
        "checkpointed in groups of N) or spread (fms-fsdp's selective_checkpointing fraction "
        "N/L of a rank's L blocks)",
    )
    group.add_argument(
        "--schedule",
        choices=(*_choices(Schedule), "zb-h1"),
        default=Schedule.ONE_F_ONE_B.value,
        help="pipeline schedule (zb = ZB-H1, alias zb-h1; dualpipe = DeepSeek-V3's DualPipe; "
        "default: 1f1b)",
    )
    group.add_argument(
        "--vpp", type=int, default=1, help="model chunks per pipeline rank (interleaved only)"
    )
    group.add_argument(
        "--microbatch-group-size-per-virtual-pipeline-stage",
        type=int,
        default=None,
        help="interleaved schedule: micro-batches run through one model chunk before the next "
        "(Megatron-Core's flag; default: pp)",
    )
    group.add_argument(
        "--micro-batch", type=int, default=1, help="sequences per micro-batch (default: 1)"
    )
    group.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help="sequences per step (default: dp × micro-batch)",
    )
    group.add_argument(
        "--cp-style",
        choices=_choices(CpStyle),
        default=CpStyle.ALLGATHER.value,
        help="context parallelism: all-gather K/V or ring (default: allgather)",
    )
    group.add_argument(
        "--precision",
        choices=_choices(Precision),
        default=Precision.BF16.value,
        help="compute precision (master weights stay fp32); fp4: the decoder layers' linear "
        "GEMMs in NVFP4 (Megatron-Core --fp4-format e2m1 --fp4-recipe nvfp4; Blackwell); "
        "default: bf16",
    )
    group.add_argument(
        "--fp8-recipe",
        choices=_choices(Fp8Recipe),
        default=Fp8Recipe.DELAYED.value,
        help="with --precision fp8: per-tensor delayed or current (tensorwise) scaling, "
        "DeepSeek-V3 blockwise, mxfp8 (Blackwell); Megatron-Core --fp8-recipe; or torchao's "
        "row-wise scaling (rowwise, torchtitan only; its rowwise_with_gw_hp is rowwise with "
        "--fp8-gemms fprop,dgrad) (default: delayed)",
    )
    group.add_argument(
        "--fp8-gemms",
        default=",".join(FP8_GEMMS),
        metavar="GEMM,…",
        help="which GEMMs of the linear layers run in FP8 with --precision fp8: some of "
        "fprop,dgrad,wgrad (default all three; the others run in BF16)",
    )
    group.add_argument(
        "--pp-layout",
        default="",
        metavar="LAYOUT",
        help="every virtual stage's layers as Megatron-Core's --pipeline-model-parallel-layout "
        "string, e.g. 'Et*4|(t*4|)*14tmL' (E embedding, t decoder layer, m MTP layer, L loss, "
        "'|' between the pp·vpp stages); excludes the other split options",
    )
    group.add_argument(
        "--pp-layers",
        default=None,
        metavar="N,N,…",
        help="layers per pipeline stage (pp counts) or per model chunk (pp·vpp counts)",
    )
    group.add_argument(
        "--pp-first-layers",
        type=int,
        default=None,
        help="layers of the first pipeline stage (Megatron --decoder-first-pipeline-num-layers)",
    )
    group.add_argument(
        "--pp-last-layers",
        type=int,
        default=None,
        help="layers of the last pipeline stage (Megatron --decoder-last-pipeline-num-layers)",
    )
    group.add_argument(
        "--pp-split",
        choices=_choices(PipelineSplit),
        default=PipelineSplit.AUTO.value,
        help="split policy: auto (even, else lighter end stages), even, ends, count the "
        "embedding/loss as a layer (Megatron --account-for-*-in-pipeline-split), or front "
        "(NeMo AutoModel: the first L mod n stages one layer more)",
    )
    group.add_argument(
        "--fp32-grads",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="accumulate gradients in fp32 (Megatron's default; --no-fp32-grads keeps 16-bit)",
    )


#: Options only a model with experts reads, with their parser defaults (``--moe-deepep``,
#: ``--moe-hybridep`` and ``--moe-load-imbalance`` are ``stage eval``'s alone). ``ep`` is
#: checked here, before the parallel config: on a dense model ``--tp 2 --ep 2`` was refused
#: for ``ep·etp`` not dividing ``tp·dp·cp`` (s29 review2), sending the user to fix a
#: divisibility that could never make the option mean anything.
_MOE_ONLY: tuple[tuple[str, object], ...] = (
    ("ep", 1), ("etp", None), ("moe_dispatcher", "alltoall"), ("moe_deepep", False),
    ("moe_hybridep", False), ("moe_load_imbalance", None),
)  # fmt: skip


def _flag(name: str, value: object) -> str:
    return f"--{name.replace('_', '-')}={value!r}"


def refuse_ignored_options(args: argparse.Namespace, model: ModelSpec) -> None:
    """Refuse, in one line naming it, an option this model and configuration would ignore (s22
    review: ``--fp8-recipe blockwise`` without ``--precision fp8``, ``--moe-deepep`` on a dense
    model, ``--dp-shard`` without ZeRO, ``--cp-style ring`` at ``--cp 1`` each printed the
    figures of the run without it, as the phase options did before s10)."""
    precision = args.precision
    if args.fp8_recipe != "delayed" and precision != "fp8":
        raise ConfigError(
            "--fp8-recipe applies to --precision fp8, but got "
            f"{_flag('fp8_recipe', args.fp8_recipe)} with --precision {precision}"
        )
    if args.fp8_gemms != "fprop,dgrad,wgrad" and precision not in ("fp8", "fp4"):
        raise ConfigError(
            f"--fp8-gemms applies to --precision fp8 or fp4, but got "
            f"{_flag('fp8_gemms', args.fp8_gemms)} with --precision {precision}"
        )
    if not model.num_experts:
        for name, default in _MOE_ONLY:
            value = getattr(args, name, default)
            if value != default:
                raise ConfigError(
                    f"--{name.replace('_', '-')} applies to a model with experts (MoE), but got "
                    f"{_flag(name, value)} with model {model.name!r}, which has none"
                )
    shard = getattr(args, "dp_shard", None)
    if shard is not None and args.zero == 0:
        raise ConfigError(
            "--dp-shard applies with --zero 1, 2 or 3 (ZeRO shards within groups of N), but got "
            f"{_flag('dp_shard', shard)} with --zero 0"
        )
    if args.cp_style != "allgather" and args.cp == 1:
        raise ConfigError(
            f"--cp-style applies with --cp > 1, but got {_flag('cp_style', args.cp_style)} "
            "with --cp 1"
        )
    if args.pp_split != "auto" and args.pp == 1:
        raise ConfigError(
            f"--pp-split applies with --pp > 1, but got {_flag('pp_split', args.pp_split)} "
            "with --pp 1"
        )
    # s31 review4: both were run as if not given. Megatron-LM turns sequence parallelism off
    # at tp 1 (validate_args in megatron/training/arguments.py: "disable sequence parallelism
    # when tp=1"), and runs the interleaved schedule only with virtual pipeline stages (with
    # none, forward_backward_pipelining_without_interleaving: 1F1B).
    if args.sp and args.tp == 1:
        raise ConfigError(
            "--sp applies with --tp > 1 (sequence parallelism splits the tensor-parallel "
            "region's activations over the tp ranks), but got --sp with --tp 1"
        )
    if args.schedule == "interleaved" and args.vpp == 1:
        raise ConfigError(
            "--schedule interleaved needs --vpp >= 2 model chunks per pipeline rank (with one "
            "it is 1f1b), but got --schedule interleaved with --vpp 1"
        )


def with_layers(model: ModelSpec, layers: int | None) -> ModelSpec:
    """``model`` with ``--layers`` applied. A model whose ``layer_pattern`` lays out a fixed
    count (Nemotron-H) takes no other: the error says so, naming the option (s26 review: it
    read "but the model has layers=4", the user's own value, with no way out named)."""
    if layers is None:
        return model
    try:
        return model.with_overrides(layers=layers)
    except ConfigError as error:
        if not model.layer_pattern:
            raise
        raise ConfigError(
            f"--layers {layers}: {error}; a model with a fixed layer_pattern takes only its "
            f"{model.layers} layers (a model TOML with base = {model.name!r} and a shorter "
            "layer_pattern sets another count)"
        ) from None


def parse_workload(args: argparse.Namespace) -> tuple[ModelSpec, ParallelConfig]:
    """The model (with overrides applied) and the parallel config, validated together.

    Raises :class:`~stage_core.errors.ConfigError` for an unknown model, a bad value or an
    invalid combination; the message names the values.
    """
    if args.global_batch is not None and args.global_batch < 1:
        global_batch = args.global_batch
        raise ConfigError(f"`global_batch` must be a positive int, but got {global_batch=}")
    model = with_layers(load_model(args.model), args.layers)
    if getattr(args, "mtp_layers", None) is not None:
        model = model.with_overrides(mtp_layers=args.mtp_layers)
    refuse_ignored_options(args, model)
    config = ParallelConfig(
        dp=args.dp,
        dp_shard=getattr(args, "dp_shard", None),
        tp=args.tp,
        cp=args.cp,
        pp=args.pp,
        ep=args.ep,
        etp=args.etp,
        moe_dispatcher=args.moe_dispatcher,
        sp=args.sp,
        cp_style=CpStyle(args.cp_style),
        schedule=Schedule("zb" if args.schedule == "zb-h1" else args.schedule),
        vpp=args.vpp,
        microbatch_group_size_per_vp_stage=args.microbatch_group_size_per_virtual_pipeline_stage,
        zero=args.zero,
        recompute=Recompute(args.recompute),
        recompute_modules=tuple(m.strip() for m in args.recompute_modules.split(",") if m.strip()),
        recompute_num_layers=args.recompute_num_layers,
        recompute_method=args.recompute_method,
        micro_batch=args.micro_batch,
        global_batch=0 if args.global_batch is None else args.global_batch,
        seq_len=args.seq_len,
        dropout=args.dropout,
        precision=Precision(args.precision),
        fp8_recipe=Fp8Recipe(args.fp8_recipe),
        fp8_gemms=tuple(name.strip() for name in args.fp8_gemms.split(",") if name.strip()),
        grad_fp32=args.fp32_grads,
        pp_split=PipelineSplit(args.pp_split),
        pp_layers=parse_pp_layers(args.pp_layers),
        pp_first_layers=args.pp_first_layers,
        pp_last_layers=args.pp_last_layers,
        pp_layout=args.pp_layout,
    )
    config.validate(model)
    if config.zero != args.zero:  # ZeRO-2/3 over one rank (stage_core.parallel.unsharded_zero)
        command = getattr(args, "command", "eval")
        print(f"stage {command}: note: {unsharded_zero_note(args.zero)}", file=sys.stderr)
    return config.resolve(model), config

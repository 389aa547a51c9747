"""How a model is executed across devices: the parallel configuration.

Contents:

- The vocabularies (:class:`Schedule`, :class:`Recompute`, :class:`CpStyle`, :class:`Precision`, …)
  live in :mod:`stage_core.parallel.vocab` and are imported here.
- :class:`ParallelConfig`: degrees, options and batch sizes, checked on construction (each
  field's type and range in :mod:`stage_core.parallel.config_fields`, their combinations
  here); derived sizes; the device meshes of dense and expert layers;
  :meth:`ParallelConfig.validate` against a model, which rejects every invalid combination
  before any work is done.
- :func:`pad_vocab`: Megatron's vocabulary padding.

Conventions (Megatron-core unless stated):

- **World.** ``world_size = pp·dp·cp·tp``; ``ep`` and ``etp`` do not multiply it.
- **Rank order.** ``axis_order`` lists axes outermost first (the last varies fastest in the rank
  id); the default ``("pp", "dp", "ep", "cp", "tp")`` is Megatron's ``"tp-cp-ep-dp-pp"`` read
  backwards: TP innermost, then CP, EP, DP, PP. Dense layers use :meth:`ParallelConfig.mesh`,
  i.e. ``axis_order`` without ``ep``.
- **MoE parallel folding** (Megatron-Core ``parallel_state``: attention layers use the
  ``tp-cp-dp-pp`` rank generator, expert layers a second ``etp-ep-edp-pp`` generator over the
  same ranks). Experts are tensor-parallel over ``etp`` (``--expert-tensor-parallel-size``,
  default ``tp``; it must divide ``tp``), and ``ep·etp`` must divide ``tp·dp·cp``. Expert layers
  use :meth:`ParallelConfig.expert_mesh`: the flattened dp×cp×tp index (tp fastest) is refolded
  into ``edp = tp·dp·cp/(ep·etp)`` (outer), ``ep`` and ``etp`` (inner), so an EP group spans
  the ranks right above the ``etp`` ranks: first the rest of tp (``tp/etp``), then cp, then dp,
  at a fixed pp coordinate. With ``etp = tp`` the tp axis is kept whole. With ``ep`` > 1 or an
  MoE model dp, ep and cp must be adjacent in ``axis_order`` with ep right after dp (a dense
  model takes any order); ``etp <
  tp`` also needs tp right after them. ZeRO and gradient reduction run over the dp×cp ranks for
  dense weights and over the ``edp`` ranks for expert weights.
- **GQA with tp > kv_heads.** Allowed when ``kv_heads`` divides ``tp``: each KV head is
  replicated on ``tp/kv_heads`` ranks (:meth:`ParallelConfig.kv_replication`), as PaLM's
  multi-query attention and inference engines do; Megatron-core itself requires tp | kv_heads.
- **Vocabulary** is padded to a multiple of ``vocab_divisible_by·tp`` (Megatron's
  ``--make-vocab-size-divisible-by``, default 128).
- **Hybrid sharding (HSDP).** ``dp_shard`` < ``dp`` splits the data-parallel ranks into
  ``dp/dp_shard`` replicas (outer) of ``dp_shard`` ranks (inner, consecutive) that shard the
  ZeRO states among themselves: PyTorch FSDP's ``HYBRID_SHARD`` (shard group a node, replicas
  across nodes), torchtitan's ``data_parallel_replicate_degree`` × ``data_parallel_shard_degree``.
  The lowering splits the mesh's dp axis in two (:mod:`stage_core.lower.program`).
- **ZeRO-2/3 over one rank** (``dp·cp = 1`` and one expert data-parallel rank) is ZeRO-0: the
  stage is set to 0 on construction (:func:`unsharded_zero`), as the frameworks run it —
  PyTorch FSDP switches any sharding strategy to ``NO_SHARD`` when its world size is 1, and
  DeepSpeed ZeRO-3 with one partition gathers nothing. ZeRO-1 is kept as given.
- **Gradient buckets** default to 25 MiB, PyTorch DDP's ``bucket_cap_mb=25``, a fixed size in
  bytes (Megatron's DDP uses ``max(4e7, 1e6·dp·cp)`` elements instead).
- **Sequence parallelism** with ``tp == 1`` is a no-op, as in Megatron
  (:attr:`ParallelConfig.sequence_parallel`).
- **Context parallelism** splits each sequence into ``2·cp`` chunks for causal load balance,
  whatever ``cp_style``: ``2·cp`` must divide the sequence length.
- **Pipeline split.** ``pp_layout`` (Megatron-Core's layout string,
  :mod:`stage_core.parallel.layout`), else ``pp_layers`` (one count per stage or per model
  chunk), else ``pp_first_layers``/``pp_last_layers`` (Megatron's
  ``--decoder-first/last-pipeline-num-layers``), else the ``pp_split`` policy decide each
  stage's layers (:mod:`stage_core.parallel.split`); the default splits evenly when it can and
  otherwise lightens the two end stages.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from stage_core.errors import ConfigError
from stage_core.lower.schedule import check_group, grouped
from stage_core.mesh import Mesh, MeshAxis
from stage_core.models.spec import ModelSpec
from stage_core.parallel.config_fields import DEFAULT_AXIS_ORDER as DEFAULT_AXIS_ORDER
from stage_core.parallel.config_fields import field_problems
from stage_core.parallel.layout import layout_problems
from stage_core.parallel.model_rules import model_violations
from stage_core.parallel.split import PipelineSplit, cached_split_layers

# The configuration's vocabularies, re-exported (imported here from stage_core.parallel.vocab).
from stage_core.parallel.vocab import (
    FP8_GEMMS as FP8_GEMMS,
)
from stage_core.parallel.vocab import (
    OP_SAC_MODULES as OP_SAC_MODULES,
)
from stage_core.parallel.vocab import (
    RECOMPUTE_METHODS as RECOMPUTE_METHODS,
)
from stage_core.parallel.vocab import (
    RECOMPUTE_MODULES as RECOMPUTE_MODULES,
)
from stage_core.parallel.vocab import (
    SCHEDULE_ALIASES as SCHEDULE_ALIASES,
)
from stage_core.parallel.vocab import (
    CpStyle as CpStyle,
)
from stage_core.parallel.vocab import (
    Fp4Recipe as Fp4Recipe,
)
from stage_core.parallel.vocab import (
    Fp8Recipe as Fp8Recipe,
)
from stage_core.parallel.vocab import (
    MoeDispatcher as MoeDispatcher,
)
from stage_core.parallel.vocab import (
    Precision as Precision,
)
from stage_core.parallel.vocab import (
    Recompute as Recompute,
)
from stage_core.parallel.vocab import (
    Schedule as Schedule,
)

#: Fields :meth:`ParallelConfig.to_dict` lists only when set (empty / None / 'block': unset).
_LISTED_WHEN_SET = (
    "recompute_modules",
    "dp_shard",
    "recompute_num_layers",
    "recompute_method",
    "microbatch_group_size_per_vp_stage",
)

#: Name of the expert-data-parallel axis of :meth:`ParallelConfig.expert_mesh`.
EXPERT_DP_AXIS = "edp"
#: Name of the expert-tensor-parallel axis of :meth:`ParallelConfig.expert_mesh` when ``etp < tp``.
EXPERT_TP_AXIS = "etp"
#: PyTorch DDP's default bucket (``bucket_cap_mb=25``).
DEFAULT_GRAD_BUCKET_BYTES = 25 * 1024 * 1024
#: Megatron's ``--make-vocab-size-divisible-by`` default.
DEFAULT_VOCAB_DIVISIBLE_BY = 128


def unsharded_zero(zero: int, dp: int, cp: int, expert_dp: int) -> bool:
    """Whether ZeRO stage ``zero`` shards nothing and runs as ZeRO-0: stage 2 or 3 over one
    data-parallel rank (``dp·cp = 1``) whose expert weights have one data-parallel rank too
    (``expert_dp = 1``; with experts folded over tp, ``expert_dp`` > 1 still shards them).

    Grounded in the frameworks' own code, not in any measurement: PyTorch FSDP's
    ``_init_core_state`` (``torch/distributed/fsdp/_init_utils.py``, pytorch/pytorch
    00743e70) sets ``NO_SHARD`` with the warning "FSDP is switching to use `NO_SHARD` instead
    of … since the world size is 1" (FULL_SHARD and SHARD_GRAD_OP alike); DeepSpeed's ZeRO-3
    ``all_gather_coalesced`` (``deepspeed/runtime/zero/partition_parameters.py``) returns
    ``_no_gather_coalesced`` when ``num_partitions == 1``, pointing each parameter at its one
    partition: no all-gather, no gather buffer. ZeRO-1 (Megatron's distributed optimizer,
    whose ``--fp8-param-gather`` keeps FP8 parameters at any dp) is not folded."""
    return zero >= 2 and dp * cp == 1 and expert_dp == 1


def unsharded_zero_note(zero: int) -> str:
    """The one-line note shown (``stage eval`` / ``trace`` / ``memory`` on stderr, a study's
    record in ``extra_json``) when ZeRO stage ``zero`` ran as ZeRO-0 (:func:`unsharded_zero`)."""
    return (
        f"zero {zero} at dp·cp = 1 shards over one rank: run as zero 0, as PyTorch FSDP "
        "(NO_SHARD at world size 1) and DeepSpeed ZeRO-3 (no gather from one partition) run it"
    )


def pad_vocab(vocab: int, multiple: int) -> int:
    """``vocab`` rounded up to a multiple of ``multiple`` (Megatron's vocabulary padding)."""
    return -(-vocab // multiple) * multiple


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelConfig:
    """Parallel degrees and execution options; model-independent rules are checked on construction.

    ``global_batch`` and ``micro_batch`` count sequences; ``global_batch=0`` means
    ``dp·micro_batch`` (one micro-batch per step). ``seq_len`` and ``dropout`` override the
    model's when not None (:meth:`resolve`). ``zero`` is the ZeRO stage; ``"fsdp"`` is stage 3;
    stages 2 and 3 over one data-parallel rank are held as 0 (:func:`unsharded_zero`).
    ``vpp`` is the number of model chunks per pipeline rank (interleaved schedule only).
    ``grad_fp32``: gradients accumulate in fp32 (Megatron's default with mixed precision,
    18 bytes of model state per parameter); false keeps them in the compute precision (the
    ZeRO paper's 16 bytes). ``etp`` is the experts' tensor-parallel size (None: ``tp``,
    Megatron's default; :attr:`expert_tp`); ``moe_dispatcher`` Megatron-Core's MoE token
    dispatcher (:class:`MoeDispatcher`). ``pp_layout``, ``pp_layers``, ``pp_first_layers``,
    ``pp_last_layers`` and ``pp_split`` choose each pipeline stage's layers (:meth:`stage_layers`).
    """

    dp: int = 1
    #: HSDP (FSDP's ``HYBRID_SHARD``, torchtitan's ``data_parallel_shard_degree``): the ranks
    #: of a ZeRO shard group, a divisor of ``dp``; the ``dp/dp_shard`` groups are replicas whose
    #: gradients are all-reduced after the reduce-scatter. None: ``dp`` (shard over all of dp).
    dp_shard: int | None = None
    tp: int = 1
    cp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int | None = None
    moe_dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL
    sp: bool = False
    cp_style: CpStyle = CpStyle.ALLGATHER
    schedule: Schedule = Schedule.ONE_F_ONE_B
    vpp: int = 1
    zero: int = 0
    recompute: Recompute = Recompute.NONE
    micro_batch: int = 1
    global_batch: int = 0
    seq_len: int | None = None
    dropout: bool | None = None
    precision: Precision = Precision.BF16
    fp8_recipe: Fp8Recipe = Fp8Recipe.DELAYED
    #: The FP4 recipe of a ``precision='fp4'`` run (Megatron-Core ``--fp4-recipe``); its
    #: quantized GEMMs are the ones ``fp8_gemms`` names (all three by default).
    fp4_recipe: Fp4Recipe = Fp4Recipe.NVFP4
    fp8_gemms: tuple[str, ...] = FP8_GEMMS
    master_weights_fp32: bool = True
    grad_fp32: bool = True
    grad_bucket_bytes: int = DEFAULT_GRAD_BUCKET_BYTES
    vocab_divisible_by: int = DEFAULT_VOCAB_DIVISIBLE_BY
    axis_order: tuple[str, ...] = DEFAULT_AXIS_ORDER
    pp_split: PipelineSplit = PipelineSplit.AUTO
    pp_layers: tuple[int, ...] = ()
    pp_first_layers: int | None = None
    pp_last_layers: int | None = None
    #: Megatron-Core's ``--pipeline-model-parallel-layout``: every virtual stage's layers as a
    #: string (``'Et*4|(t*4|)*14tmL'``: E embedding, t decoder layer, m MTP layer, L loss; ``|``
    #: between the ``pp·vpp`` stages in global order), :mod:`stage_core.parallel.layout`.
    #: Empty: none (``pp_layers``, the first/last counts or ``pp_split`` decide).
    pp_layout: str = ""
    #: Megatron-Core's ``--recompute-modules`` under ``recompute='selective'`` (names in
    #: :data:`RECOMPUTE_MODULES`); empty: its default, the core attention (``core_attn``).
    recompute_modules: tuple[str, ...] = ()
    #: Partial checkpointing under ``recompute='full'``: N layers recomputed, the others keep
    #: their activations; None: all. Which N: :data:`RECOMPUTE_METHODS` ('block', 'every';
    #: 'uniform': every layer, checkpointed in groups of N).
    recompute_num_layers: int | None = None
    recompute_method: str = "block"
    #: Megatron-Core's ``--microbatch-group-size-per-virtual-pipeline-stage``: under the
    #: interleaved schedule, the micro-batches a rank runs through one model chunk before the
    #: next (the tunable ``N`` of Llama 3's schedule, arXiv 2407.21783 Section 3.3.2); it sets
    #: the chunk order and the warm-up ``(pp − r − 1)·2 + (vpp − 1)·N``. None: ``pp``
    #: (Megatron's default). Megatron requires ``pp ≤ N ≤`` micro-batches and a last group of
    #: 0 or at least ``pp`` micro-batches (:func:`stage_core.lower.schedule.check_group`).
    microbatch_group_size_per_vp_stage: int | None = None
    #: The token embedding replicated over tp instead of vocab-parallel: every tp rank holds
    #: the whole table (sharded over dp by ZeRO only) and looks up its whole sequence; under
    #: sequence parallelism its output is then cut to the rank's sequence shard (no reduction).
    #: KempnerForge's ``apply_tensor_parallel`` leaves ``token_embedding`` unparallelized
    #: ("RowwiseParallel on nn.Embedding doesn't correctly redistribute output to Shard(1)",
    #: kempnerforge/distributed/tensor_parallel.py 0c4eba1e). False: Megatron's
    #: ``VocabParallelEmbedding`` (and torchtitan's ``RowwiseParallel`` embedding).
    tp_embedding_replicated: bool = False

    def __post_init__(self) -> None:
        problems = field_problems(self)
        if problems:
            raise ConfigError("; ".join(problems))
        if self.global_batch == 0:
            object.__setattr__(self, "global_batch", self.dp * self.micro_batch)
        problems = self._combination_problems()
        if problems:
            raise ConfigError("; ".join(problems))
        if self.dp_shard == self.dp:  # one spelling of "shard over all of dp"
            object.__setattr__(self, "dp_shard", None)
        if unsharded_zero(self.zero, self.dp, self.cp, self.expert_dp):  # nothing to shard
            object.__setattr__(self, "zero", 0)

    def _combination_problems(self) -> list[str]:
        problems: list[str] = []
        dp, cp, pp, ep, vpp = self.dp, self.cp, self.pp, self.ep, self.vpp
        micro_batch, global_batch, schedule = self.micro_batch, self.global_batch, self.schedule
        if global_batch % (micro_batch * dp):
            problems.append(
                "`micro_batch`·`dp` must divide `global_batch`, "
                f"but got ({global_batch=}, {micro_batch=}, {dp=})"
            )
        if self.recompute_modules and self.recompute is not Recompute.SELECTIVE:
            problems.append(
                "`recompute_modules` needs recompute='selective', but got "
                f"(recompute='{self.recompute}', recompute_modules={list(self.recompute_modules)})"
            )
        if self.recompute_num_layers is not None and self.recompute is not Recompute.FULL:
            problems.append(
                "`recompute_num_layers` needs recompute='full', but got "
                f"(recompute='{self.recompute}', recompute_num_layers={self.recompute_num_layers})"
            )
        op_level = OP_SAC_MODULES & set(self.recompute_modules)
        if op_level and len(self.recompute_modules) > 1:
            problems.append(
                f"`recompute_modules` '{min(op_level)}' (torchtitan's op-level checkpointing) "
                "covers the whole layer and takes no other module, but got "
                f"{list(self.recompute_modules)}"
            )
        if vpp > 1 and schedule is not Schedule.INTERLEAVED:
            problems.append(
                f"`vpp` > 1 needs schedule='interleaved', but got ({vpp=}, schedule='{schedule}')"
            )
        group = self.microbatch_group_size_per_vp_stage
        if group is not None and (schedule is not Schedule.INTERLEAVED or vpp == 1):
            problems.append(
                "`microbatch_group_size_per_vp_stage` orders the interleaved schedule's chunks: "
                f"it needs schedule='interleaved' with `vpp` > 1, but got ({vpp=}, "
                f"schedule='{schedule}')"
            )
        if schedule is Schedule.INTERLEAVED:
            if pp == 1:
                problems.append(f"schedule='interleaved' needs `pp` > 1, but got ({pp=})")
            elif not problems and group is not None:
                problems += self._group_problems(group)
            elif not problems and self.num_micro_batches % pp:
                num_micro_batches = self.num_micro_batches
                problems.append(
                    "schedule='interleaved' needs `pp` to divide the number of micro-batches "
                    f"(global_batch/(micro_batch·dp)), but got ({num_micro_batches=}, {pp=})"
                )
        if schedule is Schedule.DUALPIPE and not problems:
            m = self.num_micro_batches
            if pp % 2 or m % 2 or m < 2 * pp:
                problems.append(
                    "schedule='dualpipe' needs an even `pp` and an even number of micro-batches "
                    f"(global_batch/(micro_batch·dp)) of at least 2·`pp`, but got ({pp=}, {m=})"
                )
        if self.precision is Precision.FP4 and self.fp8_recipe is not Fp8Recipe.DELAYED:
            problems.append(
                "precision='fp4' and an FP8 recipe are exclusive (Megatron-Core's --fp4-format "
                f"and --fp8-format), but got fp8_recipe='{self.fp8_recipe}' with precision='fp4'"
            )
        problems += self._hybrid_shard_problems()
        tp, etp = self.tp, self.expert_tp
        if tp % etp:
            problems.append(
                f"`etp` (expert tensor parallel size) must divide `tp`, but got ({etp=}, {tp=})"
            )
        elif (dp * cp * tp) % (ep * etp):
            problems.append(
                "`ep`·`etp` must divide `tp`·`dp`·`cp` (expert layers refold the same ranks, "
                "Megatron-Core's MoE parallel folding), "
                f"but got ({ep=}, {etp=}, {tp=}, {dp=}, {cp=})"
            )
        elif etp < tp and [a for a in self.axis_order if a != "pp"] != ["dp", "ep", "cp", "tp"]:
            problems.append(
                "`etp` < `tp` needs tp innermost, right after dp, ep and cp in `axis_order`, "
                f"but got ({etp=}, {tp=}, axis_order={self.axis_order!r})"
            )
        first, last, listed = self.pp_first_layers, self.pp_last_layers, self.pp_layers
        ends = first is not None or last is not None
        if listed and ends:
            problems.append(
                "give either `pp_layers` or `pp_first_layers`/`pp_last_layers`, not both, "
                f"but got ({listed=}, {first=}, {last=})"
            )
        if (listed or ends) and self.pp_split not in (PipelineSplit.AUTO, PipelineSplit.EVEN):
            problems.append(
                f"pp_split='{self.pp_split}' cannot be combined with explicit stage layer counts "
                "(Megatron forbids counting the embedding or loss with uneven first/last stages)"
            )
        if ends and pp == 1:
            problems.append(f"`pp_first_layers`/`pp_last_layers` need `pp` > 1, but got ({pp=})")
        return problems + self._layout_problems()

    def _layout_problems(self) -> list[str]:
        """``pp_layout``'s own rules (:func:`~stage_core.parallel.layout.layout_problems`) and
        its exclusion of the other split options (Megatron-Core's TransformerConfig refuses a
        layout beside the first/last-stage counts or the embedding/loss accounting)."""
        layout = self.pp_layout
        if not layout:
            return []
        others = {
            "pp_layers": list(self.pp_layers) or None,
            "pp_first_layers": self.pp_first_layers,
            "pp_last_layers": self.pp_last_layers,
        }
        given = [f"{name}={value}" for name, value in others.items() if value is not None]
        if self.pp_split not in (PipelineSplit.AUTO, PipelineSplit.EVEN):
            given.append(f"pp_split='{self.pp_split}'")
        if given:
            return [
                f"`pp_layout` spells out every stage's layers and takes no other split option, "
                f"but got pp_layout={layout!r} with {', '.join(given)}"
            ]
        return layout_problems(layout, self.pp, self.vpp)

    def _hybrid_shard_problems(self) -> list[str]:
        dp, dp_shard, zero = self.dp, self.dp_shard, self.zero
        if dp_shard is None or dp_shard == dp:
            return []
        if dp % dp_shard:
            return [f"`dp_shard` must divide `dp`, but got ({dp_shard=}, {dp=})"]
        if zero == 0:
            return [
                "`dp_shard` < `dp` (hybrid sharding) needs ZeRO (zero 1, 2 or 3): without it "
                f"nothing is sharded, but got ({dp_shard=}, {dp=}, {zero=})"
            ]
        return []

    # ------------------------------------------------------------------ derived sizes

    @property
    def world_size(self) -> int:
        """``pp·dp·cp·tp`` (``ep`` re-divides the dp×cp ranks, it adds none)."""
        return self.pp * self.dp * self.cp * self.tp

    def _group_problems(self, group: int) -> list[str]:
        """Megatron-Core's constraints on ``microbatch_group_size_per_vp_stage``
        (:func:`stage_core.lower.schedule.check_group`), as one-line problems."""
        try:
            check_group(self.pp, self.num_micro_batches, group)
        except ConfigError as error:
            return [str(error)]
        return []

    @property
    def quantized(self) -> bool:
        """Whether the decoder layers' linear GEMMs run quantized: precision 'fp8' or 'fp4'."""
        return self.precision in (Precision.FP8, Precision.FP4)

    @property
    def linear_recipe(self) -> str:
        """The recipe that quantizes the linear layers: ``fp4_recipe`` ('nvfp4') under FP4, else
        ``fp8_recipe`` (read only when :attr:`quantized`)."""
        if self.precision is Precision.FP4:
            return str(self.fp4_recipe)
        return str(self.fp8_recipe)

    @property
    def schedule_kind(self) -> str:
        """The schedule as the order functions of :mod:`stage_core.lower.schedule` take it:
        ``str(schedule)``, with the interleaved group size when one is set (``"interleaved/N"``,
        :func:`~stage_core.lower.schedule.grouped`)."""
        return grouped(str(self.schedule), self.microbatch_group_size_per_vp_stage)

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches per step on each pipeline: ``global_batch / (micro_batch·dp)``."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def shard_dp(self) -> int:
        """The data-parallel ranks of a ZeRO shard group: ``dp_shard``, or ``dp`` when None."""
        return self.dp if self.dp_shard is None else self.dp_shard

    @property
    def replicate_dp(self) -> int:
        """The replicas of a hybrid-sharded (HSDP) run: ``dp/dp_shard`` (1 without HSDP)."""
        return self.dp // self.shard_dp

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel degree of the experts: ``etp``, or ``tp`` when it is None."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Data-parallel degree of expert weights: ``tp·dp·cp/(ep·etp)``."""
        return self.tp * self.dp * self.cp // (self.ep * self.expert_tp)

    @property
    def sequence_parallel(self) -> bool:
        """Whether sequence parallelism is in effect (``sp`` with ``tp`` > 1)."""
        return self.sp and self.tp > 1

    def sequence_length(self, model: ModelSpec) -> int:
        """The training sequence length: this config's ``seq_len`` or else the model's."""
        return model.seq_len if self.seq_len is None else self.seq_len

    def resolve(self, model: ModelSpec) -> ModelSpec:
        """``model`` with this config's ``seq_len`` and ``dropout`` overrides applied."""
        changes: dict[str, Any] = {}
        if self.seq_len is not None and self.seq_len != model.seq_len:
            changes["seq_len"] = self.seq_len
        if self.dropout is not None and self.dropout != model.dropout:
            changes["dropout"] = self.dropout
        return model.with_overrides(**changes) if changes else model

    def padded_vocab(self, model: ModelSpec) -> int:
        """The vocabulary rounded up to a multiple of ``vocab_divisible_by·tp`` (Megatron)."""
        return pad_vocab(model.vocab, self.vocab_divisible_by * self.tp)

    def kv_replication(self, model: ModelSpec) -> int:
        """How many TP ranks hold each KV head: ``tp/kv_heads`` when ``tp > kv_heads``, else 1."""
        return max(1, self.tp // model.kv_heads)

    def layers_per_chunk(self, model: ModelSpec) -> int:
        """Layers per model chunk of an even split: ``layers/(pp·vpp)`` (a pipeline rank holds
        ``vpp`` chunks); :meth:`stage_layers` gives each chunk's count of any split."""
        return model.layers // (self.pp * self.vpp)

    def stage_layers(self, model: ModelSpec) -> tuple[int, ...]:
        """The layers of every global virtual stage ``v·pp + r`` (``pp·vpp`` counts), by
        :func:`stage_core.parallel.split.split_layers`; a :class:`ConfigError` if impossible."""
        return cached_split_layers(
            model.layers,
            self.pp,
            self.vpp,
            self.pp_split,
            self.pp_first_layers,
            self.pp_last_layers,
            self.pp_layers,
            self.pp_layout,
        )

    # ------------------------------------------------------------------ meshes

    def mesh(self) -> Mesh:
        """The mesh of dense layers: ``axis_order`` without ``ep`` (world size pp·dp·cp·tp)."""
        sizes = {"pp": self.pp, "dp": self.dp, "cp": self.cp, "tp": self.tp}
        return Mesh(tuple(MeshAxis(name, sizes[name]) for name in self.axis_order if name != "ep"))

    def expert_mesh(self) -> Mesh:
        """The mesh of expert layers: dp and cp (and tp when ``etp < tp``) refolded into
        ``edp`` (outer), ``ep`` and, when ``etp < tp``, ``etp`` (inner)."""
        split = self.expert_tp < self.tp
        sizes = {"pp": self.pp, EXPERT_DP_AXIS: self.expert_dp, "ep": self.ep, "tp": self.tp}
        axes = []
        for name in self.axis_order:
            if name == "cp" or (split and name == "tp"):
                continue
            key = EXPERT_DP_AXIS if name == "dp" else name
            axes.append(MeshAxis(key, sizes[key]))
            if split and name == "ep":
                axes.append(MeshAxis(EXPERT_TP_AXIS, self.expert_tp))
        return Mesh(tuple(axes))

    # ------------------------------------------------------------------ validation

    def violations(self, model: ModelSpec) -> tuple[str, ...]:
        """Every rule this config breaks for ``model``, one message each (empty when valid;
        :func:`stage_core.parallel.model_rules.model_violations`)."""
        return model_violations(self, model)

    def validate(self, model: ModelSpec) -> None:
        """Raise a :class:`ConfigError` naming every rule broken for ``model``."""
        problems = self.violations(model)
        if problems:
            raise ConfigError(
                f"invalid parallel config for model {model.name!r}: " + "; ".join(problems)
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain values (enums as strings, tuples as lists), in field order."""
        result: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, StrEnum):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            unset = "block" if field.name == "recompute_method" else None
            if field.name in _LISTED_WHEN_SET and (value or None) == unset:
                continue  # listed only when set: records of earlier studies keep their keys
            result[field.name] = value
        return result

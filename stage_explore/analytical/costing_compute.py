"""The compute timer of a block kind in the analytical backend: how long each compute
instruction of a bound block takes, per kernel (the accelerator's kernel model,
:class:`~stage_explore.analytical.kernels.KernelTimer`) or by the roofline with efficiencies,
and what the framework profile puts into that timer: the block's instructions as the profile's
GEMMs run them (fused q, k, v and gate / up projections), Transformer Engine's FP8 casts (fused
into the norm, or the FP8 all-gathers' shards), the fused weight-gradient accumulator, the MoE
dispatcher's chunk sorts and FP8 padding, and context parallelism's per-step keys.

:class:`ComputeCosting` is a mixin of :class:`~stage_explore.analytical.costing.BlockCosting`,
whose phase program (:meth:`~stage_explore.analytical.costing.BlockCosting._phase_program`)
times its compute instructions with :meth:`ComputeCosting._compute_timer` (the analytical
backend owns the framework profile it reads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stage_core.blocks import MTP_HEAD, mtp_layer_of_block
from stage_core.lower.bind import BoundBlock, Instr
from stage_core.lower.fp8 import fp8_block
from stage_core.models.layers import Mixer, layer_kind_of_block
from stage_core.models.spec import ModelSpec
from stage_core.ops import window_pairs
from stage_core.parallel import MoeDispatcher
from stage_core.parallel.config import ParallelConfig
from stage_core.parallel.vocab import Fp8Recipe
from stage_explore.analytical.eager import (
    bias_epilogue_bytes,
    eager_expert_kernels,
    eager_extra_bytes,
    eager_op_bytes,
)
from stage_explore.analytical.eager_attention import eager_attention
from stage_explore.analytical.eager_rmsnorm import fused_rmsnorm_op_bytes
from stage_explore.analytical.expert_gemms import grouped_gemm_groups
from stage_explore.analytical.fp8_casts import fused_norm_casts, split_quantize_kernels
from stage_explore.analytical.fp8_gather import (
    FLOAT8_TP_RECIPES,
    cast_shards,
    fp8_gathered,
    nccl_fp8_gathered,
    te_fp8_linear,
)
from stage_explore.analytical.fp8_roles import (
    cast_shares,
    check_fp8_framework,
    check_fp8_recipe,
    gemm_role,
)
from stage_explore.analytical.framework_profile import FrameworkProfile
from stage_explore.analytical.fused_fc1 import fuse_fc1
from stage_explore.analytical.fused_in_proj import fuse_in_proj
from stage_explore.analytical.fused_qkv import fuse_qkv
from stage_explore.analytical.gemm_tiles import gemm_shape
from stage_explore.analytical.kernels import KernelTimer
from stage_explore.analytical.loss_kernels import loss_logits
from stage_explore.analytical.parts import Point
from stage_explore.analytical.routing_tiles import routing_share
from stage_explore.analytical.ssd_kernels import SSDKernel, SSDShape, ssd_kernels

#: The blocks that hold the output layer: the head and the MTP heads that share its weight.
_OUTPUT_LAYER_BLOCKS = frozenset({"head", MTP_HEAD})
#: The output layer's weight (:func:`stage_core.blocks.head_block`).
_OUTPUT_WEIGHT = "output"


class ComputeCosting:
    """The compute timer of a block kind and the instructions it times (module docstring)."""

    framework: FrameworkProfile

    @property
    def _cp_traced(self) -> bool:
        """torch's ``context_parallel`` ring traced into the compiled block's graph: the
        profile's ``cp_traced_ring`` on a compiled run (``fused_elementwise``)."""
        return self.framework.cp_traced_ring and self.framework.fused_elementwise

    def _compute_timer(self, point: Point, kind: str) -> Callable[[Instr], float]:
        """How long a compute instruction of block ``kind`` takes: the accelerator's kernel
        model (:mod:`~stage_explore.analytical.kernels`) when its system has one, else the
        roofline with efficiencies."""
        accelerator, dtype = point.system.accelerator, point.dtype
        kernels = accelerator.kernels
        if kernels is not None and self.framework.moe_grouped_kernel:
            kernels = kernels.single_launch_groups()
        if kernels is None:
            return lambda i: accelerator.compute_time_s(
                i.flops, i.bytes_read + i.bytes_written, dtype
            )
        sizes, parallel = point.workload.sizes, point.workload.parallel
        block = point.blocks[kind]
        weights = frozenset(weight.name for weight in block.weights)
        fp8_linears = self._fp8_linears(parallel, kind)
        if fp8_linears and not fp8_block(kind):  # an MTP head reads the head's output layer,
            weights |= {_OUTPUT_WEIGHT}  # which it does not hold (lower/program.py)
        if dtype == "fp8":
            check_fp8_recipe(accelerator, parallel.linear_recipe)
            framework = self.framework
            check_fp8_framework(
                framework.name, framework.fp8_weight_cast_per_use, parallel.linear_recipe
            )
        keys = sizes.get("S", point.workload.model.seq_len)
        queries = max(1, keys // parallel.cp)  # one kernel call's rows: the rank's chunk
        if parallel.cp > 1 and (str(parallel.cp_style) == "ring" or self.framework.cp_merge_fp32):
            # load-balanced ring attention runs one kernel per step on S/cp-long chunks (TE
            # AttnFuncWithCPAndKVP2P, causal: step 0 the local two chunks under the mask, then
            # all local queries x the first KV chunk or the second query chunk x both): every
            # step's slowest rank sees S/(2·cp) keys per query row, the causal half of S/cp.
            # torch's context_parallel (cp_merge_fp32) gathers the keys but calls SDPA per
            # chunk the same way (_templated_ring_attention: the last rank's query.chunk /
            # key.chunk(2)[0] steps), whatever its rotater
            keys = max(1, keys // parallel.cp)
        layer = layer_kind_of_block(kind) or mtp_layer_of_block(kind)  # an MTP module's layer
        sliding = layer is not None and layer.mixer is Mixer.SLIDING
        if sliding:  # the mean keys a query row sees inside its window (no further halving)
            keys = max(1, window_pairs(keys, sizes["W"]) // keys)
        return KernelTimer(
            accelerator,
            kernels,
            dtype,
            weights,
            keys=keys,
            head_dim=sizes.get("D", point.workload.model.head_dim),
            head_dims=(sizes["A"], sizes["U"]) if "A" in sizes else (0, 0),  # latent attention
            attention_queries=0 if sliding else queries,  # a window's grid: not modelled
            causal=not sliding,  # decoder language models; a window's keys are counted above
            attention_kernel=self.framework.attention_kernel_on(accelerator.peak_flops_per_s),
            cp_merge=parallel.cp if self.framework.cp_merge_fp32 else 0,
            cp_compiled=self._cp_traced,
            te_cp_merge=(  # Transformer Engine's ring (P2P) context parallelism
                parallel.cp if self.framework.te_cp_merge and parallel.cp_style == "ring" else 0
            ),
            fp8_recipe=parallel.linear_recipe,
            fp8_gemms=parallel.fp8_gemms,
            fp8_block=fp8_linears,
            fp8_training=True,
            shares=(
                cast_shares(self._timed_instrs(block, weights), weights, parallel.fp8_gemms)
                if dtype == "fp8"
                else {}
            ),
            cast_shards=cast_shards(self._fp8_gathered(point, kind), parallel.tp),
            norm_casts=self._norm_casts(point, kind) if dtype == "fp8" else frozenset(),
            te_current_scaling=self.framework.te_current_scaling,
            loss_logits=loss_logits(block.fwd),
            te_loss=self.framework.te_cross_entropy,
            native_loss=self.framework.native_cross_entropy,
            xentropy_loss=self.framework.xentropy_cross_entropy,
            bf16_loss=self.framework.loss_16bit_buffers > 0,  # eager loss on un-upcast logits
            metric_losses=self.framework.train_metric_losses,
            eager_bytes=self._eager_bytes(point.workload.model),
            eager_extra=eager_extra_bytes(
                point.workload.model,
                self.framework.eager_modules,
                op_fuser=self.framework.moe_grouped_kernel,  # TE's fused expert ops clamp
            ),
            attention_eager=eager_attention(
                point.workload.model,
                self.framework.eager_modules,
                self.framework.attention_kernel_on(accelerator.peak_flops_per_s),
                tp=parallel.tp,
                fused_qkv=self.framework.fused_qkv,
                single_qkv_rope=self.framework.fused_single_qkv_rope,
            ),
            expert_share=routing_share(point.workload.model, self.framework.moe_fake_balanced_gate),
            sort_chunks=self._sorts_chunks(point),
            fp8_padding=self._pads_for_fp8(point, kind),
            routed_gather=self._routed_gather(point),
            sequential_experts=self._sequential_experts(point),
            cast_splits=self._cast_splits(point, kind),
            expert_kernels=eager_expert_kernels(
                point.workload.model,
                self.framework.eager_modules,
                point.workload.model.num_experts // max(1, parallel.ep),
                fused=self.framework.fused_elementwise,
                deepep=self.framework.moe_deepep,
                trained_router=not self.framework.moe_fake_balanced_gate,
                op_fuser=self.framework.moe_grouped_kernel,
            ),
            memory_kernel_s=kernels.memory_kernel_s,
            wgrad_accumulator=self._wgrad_accumulator(point),
            ssd_kernels=self._ssd_kernels(point, kind),
        )

    def _fp8_linears(self, parallel: ParallelConfig, kind: str) -> bool:
        """Whether block ``kind``'s linear GEMMs run as FP8 linears under an FP8 recipe: the
        layers' (:func:`~stage_core.lower.fp8.fp8_block`), and the output layer's of the head
        and the MTP heads under ``fp8_output_proj`` with the ``mxfp8`` recipe (Megatron-Core
        ``is_te_mxfp8_output_proj_active``: ``fp8_output_proj`` and ``fp8_recipe == "mxfp8"``,
        ``megatron/core/transformer/mxfp8_output_proj.py``, NVIDIA/Megatron-LM 620cf750; any
        other recipe keeps the plain 16-bit ``ColumnParallelLinear``)."""
        if fp8_block(kind):
            return True
        return (
            self.framework.fp8_output_proj
            and kind in _OUTPUT_LAYER_BLOCKS
            and parallel.linear_recipe == Fp8Recipe.MXFP8.value
        )

    def _eager_bytes(self, model: ModelSpec) -> dict[str, int]:
        """The eager table of the framework's module code (:func:`eager_op_bytes`), with the
        forward bias adds its GEMMs perform under ``linear_bias_epilogue``
        (:func:`bias_epilogue_bytes`)."""
        framework = self.framework
        table = eager_op_bytes(
            model,
            framework.eager_modules,
            fused=framework.fused_elementwise,
            deepep=framework.moe_deepep,
            trained_router=not framework.moe_fake_balanced_gate,
            # fused_single_qkv_rope runs TE's fused QKV rotary kernel, not rope_utils' ops
            # (eager_qkv_split module docstring)
            rope_fusion=framework.rope_fusion
            or (framework.fused_qkv and framework.fused_single_qkv_rope),
            op_fuser=framework.moe_grouped_kernel,  # TE's fused expert ops add the biases
        )
        if framework.linear_bias_epilogue:
            table.update(bias_epilogue_bytes(model))
        if framework.fused_rmsnorm:  # nn.RMSNorm on PyTorch's fused kernels (eager_rmsnorm)
            table.update(
                fused_rmsnorm_op_bytes(
                    model, framework.eager_modules, compiled=framework.fused_elementwise
                )
            )
        return table

    def _ssd_kernels(self, point: Point, kind: str) -> dict[str, tuple[SSDKernel, ...]]:
        """The kernels mamba_ssm launches for block ``kind``'s Mamba-2 scan, by phase
        (:mod:`~stage_explore.analytical.ssd_kernels`), on one rank's share: the micro-batch,
        whole sequences, the heads and groups split over tp × cp (Megatron-Core's
        ``nheads_local_tpcp``); empty for a block without one."""
        layer = layer_kind_of_block(kind) or mtp_layer_of_block(kind)
        if layer is None or layer.mixer is not Mixer.MAMBA:
            return {}
        sizes, parallel = point.workload.sizes, point.workload.parallel
        split = parallel.tp * parallel.cp
        shape = SSDShape(
            batch=parallel.micro_batch,
            seq=sizes["S"],
            heads=sizes["Hs"] // split,
            groups=sizes["Gs"] // split,
            head_dim=sizes["Ps"],
            state=sizes["Ns"],
            chunk=sizes["Qs"],
            element=4 if point.dtype == "fp32" else 2,
        )
        kernels = point.system.accelerator.kernels
        assert kernels is not None  # only called for a kernel model
        return ssd_kernels(shape, kernels.sm_count)

    def _cast_splits(self, point: Point, kind: str) -> dict[str, int]:
        """Cast kernels per FP8 operand cast of block ``kind``'s grouped expert GEMMs, by GEMM
        name: one per local expert under the profile's ``moe_split_quantize`` (Transformer
        Engine's ``GroupedLinear``: :func:`~stage_explore.analytical.fp8_casts.
        split_quantize_kernels`) or with the experts as ``SequentialMLP`` modules (any recipe);
        empty outside FP8 training of the block or without either."""
        sequential = self._sequential_experts(point)  # each expert's TE linears cast their own
        if point.dtype != "fp8" or not fp8_block(kind):
            return {}
        split = self.framework.moe_split_quantize and not self.framework.moe_grouped_kernel
        if not (split or sequential):
            return {}
        recipe = point.workload.parallel.linear_recipe
        block = point.blocks[kind]
        splits = {}
        for instr in self._timed_instrs(block, frozenset(w.name for w in block.weights)):
            shape = gemm_shape(instr)
            groups = grouped_gemm_groups(instr, shape) if shape is not None else 0
            if (count := split_quantize_kernels(groups, recipe, split, sequential)) > 1:
                splits[instr.name] = count
        return splits

    def _norm_casts(self, point: Point, kind: str) -> frozenset[tuple[str, str]]:
        """``(phase, tensor)`` of block ``kind``'s norm outputs whose FP8 quantization
        Transformer Engine's fused norm + linear layer runs in the norm kernel
        (:func:`~stage_explore.analytical.fp8_casts.fused_norm_casts`): the FP8 copy under
        delayed scaling, whose scale is known before the norm runs; the amax under current
        scaling (``te_current_scaling``)."""
        if not fp8_block(kind):
            return frozenset()
        block = point.blocks[kind]
        weights = frozenset(weight.name for weight in block.weights)
        gemms = point.workload.parallel.fp8_gemms
        return fused_norm_casts(
            self._timed_instrs(block, weights),
            point.workload.parallel.linear_recipe,
            lambda i: gemm_role(i, weights) == "fprop" and te_fp8_linear(i, weights, gemms),
            self.framework.te_current_scaling,
        )

    def _wgrad_accumulator(self, point: Point) -> int:
        """Bytes per element of the gradient buffer a linear layer's weight-gradient GEMM adds
        into (Megatron-Core's ``--gradient-accumulation-fusion``, the ``fused-linear``
        profiles: :func:`~stage_explore.analytical.kernels.wgrad_accumulate_bytes`); 0 when
        the GEMM writes a fresh gradient."""
        if self.framework.grad_accumulation != "fused-linear":
            return 0
        return point.workload.grad_bytes

    def _sorts_chunks(self, point: Point) -> bool:
        """Whether the MoE layers run Megatron-Core's all-to-all dispatcher's chunk sorts
        (:mod:`~stage_explore.analytical.megatron_dispatch`): the profile's ``moe_sort_chunks``,
        the all-to-all dispatcher without DeepEP, and more than one expert per rank."""
        return self.framework.moe_sort_chunks and self._alltoall_local_experts(point)

    def _sequential_experts(self, point: Point) -> bool:
        """Whether the MoE layers run their local experts as Megatron-Core's ``SequentialMLP``
        with its concatenations (:mod:`~stage_explore.analytical.megatron_dispatch`): the
        profile's ``moe_sequential_mlp``, the all-to-all dispatcher (the one read) without
        DeepEP, and more than one expert per rank (one expert is called on the tokens as they
        are)."""
        return self.framework.moe_sequential_mlp and self._alltoall_local_experts(point)

    def _alltoall_local_experts(self, point: Point) -> bool:
        """Whether the MoE layers dispatch through Megatron-Core's all-to-all dispatcher
        (without DeepEP) to more than one expert per rank: where the chunk sorts and
        ``SequentialMLP``'s concatenations run."""
        model, parallel = point.workload.model, point.workload.parallel
        flex = self.framework.moe_deepep or self.framework.moe_hybridep  # the flex dispatcher
        if flex or parallel.moe_dispatcher is not MoeDispatcher.ALLTOALL:
            return False
        return model.num_experts // max(1, parallel.ep) > 1

    def _routed_gather(self, point: Point) -> int:
        """How many ranks' routed tokens the chunk sorts and the FP8 padding move: the
        experts' tensor-parallel size under sequence parallelism, whose all-gather of the
        received tokens precedes them (:mod:`~stage_explore.analytical.megatron_dispatch`);
        1 without sequence parallelism (each rank holds every token, nothing is gathered)."""
        parallel = point.workload.parallel
        return parallel.expert_tp if parallel.sequence_parallel else 1

    def _pads_for_fp8(self, point: Point, kind: str) -> bool:
        """Whether block ``kind``'s routed experts pad their rows for FP8 GEMMs
        (:mod:`~stage_explore.analytical.megatron_dispatch`): the profile's ``moe_fp8_padding``,
        an FP8 run whose block runs its linear layers in FP8, and dropless random routing
        (:func:`~stage_explore.analytical.routing_tiles.routing_share`: a capacity-padded
        expert's count is its capacity, and an exactly balanced one the mean; the counts are
        taken as aligned then, which leaves TE's ``Fp8Padding`` nothing to copy)."""
        if not self.framework.moe_fp8_padding or point.dtype != "fp8" or not fp8_block(kind):
            return False
        model = point.workload.model
        return routing_share(model, self.framework.moe_fake_balanced_gate) > 0.0

    def _fp8_gathered(self, point: Point, kind: str) -> frozenset[tuple[str, str]]:
        """``(phase, tensor)`` of block ``kind``'s tensor-parallel all-gathers that carry FP8
        data: an FP8 run under Transformer Engine's userbuffers overlap (``tp_comm_overlap``,
        not PyTorch's async TP) gathers its FP8 linear layers' quantized inputs
        (:mod:`~stage_explore.analytical.fp8_gather`), so does Transformer Engine's NCCL
        sequence-parallel gather without userbuffers (``te_sp_fp8_gather``; under ``mxfp8`` not
        the output gradients) and torchao's Float8 tensor parallelism (``float8_tp``, the
        ``tensorwise`` recipe) with or without async TP; empty otherwise."""
        if point.dtype != "fp8":
            return frozenset()
        return self.fp8_tp_gathered(point.workload.parallel, point.blocks[kind])

    def fp8_tp_gathered(
        self, parallel: ParallelConfig, block: BoundBlock
    ) -> frozenset[tuple[str, str]]:
        """:meth:`_fp8_gathered` without an evaluation point: ``(phase, tensor)`` of the
        all-gathers of ``block`` that carry FP8 data under ``parallel`` (an FP8 or FP4 run:
        the FP4 recipe ``nvfp4`` gathers none) and this profile. The Chakra traces' FP8
        bytes (:mod:`~stage_explore.analytical.fp8_wire`) are chosen by it too."""
        framework = self.framework
        torchao = framework.float8_tp and parallel.linear_recipe in FLOAT8_TP_RECIPES
        userbuffers = framework.tp_comm_overlap and not framework.micro_pipeline_tp
        nccl = framework.te_sp_fp8_gather and not framework.tp_comm_overlap and not torchao
        quantized = parallel.quantized and fp8_block(str(block.kind))
        if not quantized or not (torchao or userbuffers or nccl):
            return frozenset()
        weights = frozenset(weight.name for weight in block.weights)
        instrs = self._timed_instrs(block, weights)
        gathered = fp8_gathered(instrs, weights, parallel.fp8_gemms, parallel.linear_recipe)
        return nccl_fp8_gathered(gathered, parallel.linear_recipe) if nccl else gathered

    def _timed_instrs(self, block: BoundBlock, weights: frozenset[str]) -> tuple[Instr, ...]:
        """A block's forward and backward instructions as the profile's GEMMs run them (one
        cast per fused q, k, v or gate, up GEMM input)."""
        return self._fused_projections((*block.fwd, *block.bwd), weights)

    def _fused_projections(
        self, instrs: Sequence[Instr], weights: frozenset[str]
    ) -> tuple[Instr, ...]:
        """``instrs`` with the profile's fused projections: one GEMM over the concatenated
        q, k, v weights (``fused_qkv``) and one over a gated MLP's gate and up weights
        (``fused_fc1``: all gated MLPs or the routed experts'), their partial input gradients'
        adds spared; a Mamba-2 mixer's input projections always run as one GEMM
        (:mod:`~stage_explore.analytical.fused_in_proj`)."""
        fused = fuse_in_proj(instrs, weights)
        if self.framework.fused_qkv:
            fused = fuse_qkv(fused, weights)
        return fuse_fc1(fused, weights, self.framework.fused_fc1)

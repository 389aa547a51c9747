"""The framework-profile options of mixture-of-experts layers: the expert dispatch and its overlap,
routing, and the expert GEMMs' inputs: each option's documentation (below), the framework flag it
stands for (:data:`MOE_FLAGS`) and its field with the default (:class:`MoeOptions`, a base of
:class:`~stage_explore.analytical.framework_profile.FrameworkProfile`).

Options (all booleans unless said):

- ``moe_comm_overlap`` — expert-parallel dispatch/combine all-to-alls run beside another
  micro-batch's compute (Megatron ``--overlap-moe-expert-parallel-comm``).
- ``moe_shared_expert_overlap`` — the shared experts' MLP runs while the dispatch all-to-all is
  in flight (Megatron ``--moe-shared-expert-overlap``: "overlap between shared expert
  computations and dispatcher communications; without this, the shared experts execute after
  the routed experts"); off: after the routed experts, as Megatron's default.
- ``moe_load_imbalance`` (float ≥ 1) — tokens routed to the busiest expert-parallel rank over
  the mean (the max/mean tokens-per-expert ratio Megatron-Core's MoE router balances with its
  auxiliary loss). The step waits for that rank, so its routed experts' compute and the
  dispatch/combine traffic are charged at this factor (:func:`~stage_explore.analytical.blocktime.
  imbalanced_timers`), under expert parallelism only (at ep 1 every rank holds every expert:
  :func:`~stage_explore.analytical.blocktime.rank_imbalance`). 1.0 (every profile's default):
  balanced routing, what benchmarks run with Megatron's ``--moe-router-force-load-balancing``.
- ``moe_deepep`` — the expert dispatch and combine run on DeepEP (Megatron
  ``--moe-token-dispatcher-type flex --moe-enable-deepep``; Megatron-Bridge
  ``moe_flex_dispatcher_backend="deepep"``): its internode kernels send a token once to each
  remote node holding any of its top-k experts and fan it out over NVLink there (DeepEP README,
  "normal kernels": NVLink-to-RDMA forwarding), so the scale-out level of the expert
  all-to-all carries :func:`~stage_explore.analytical.collectives.deepep_scale_out_fraction`
  of NCCL's bytes. Off (every profile's default): NCCL all-to-all, every (token, expert) pair
  sent. Inside a node DeepEP sends a token once per destination rank, not once per expert
  (:mod:`~stage_explore.analytical.deepep`). HybridEP (Megatron-Bridge
  ``moe_flex_dispatcher_backend="hybridep"``) sends the same tokens ("Similar to DeepEP, Hybrid-EP
  first performs IB communication between peer GPUs, then each rank distributes the received
  inter-node data locally": deepseek-ai/DeepEP ``docs/Hybrid-EP_Implementation.md`` §8).
- ``moe_fp8_dispatch`` — under ``moe_deepep`` and FP8 linear layers, the messages DeepEP's
  dispatch kernel sends carry FP8 (E4M3) elements and one fp32 scale per 128 of them, not the
  16-bit activations: the forward dispatch and, in the backward, the combine's gradient (the
  activation gradient before the experts' down projections); the combine and the dispatch's
  gradient stay 16-bit. DeepSeek-V3 report (arXiv 2412.19437) Section 3.3.4, 'Low-Precision
  Communication': "we quantize the activation before MoE up-projections into FP8 and then apply
  dispatch components ... A similar strategy is applied to the activation gradient before MoE
  down-projections. For both the forward and backward combine components, we retain them in
  BF16"; DeepEP's ``Buffer.dispatch`` takes x as ``[num_tokens, hidden]`` float8_e4m3fn with
  ``[num_tokens, hidden // 128]`` float scales (deepseek-ai/DeepEP ``deep_ep/buffer.py``). So
  such a message has :data:`FP8_DISPATCH_BYTES_PER_ELEMENT` bytes per element. Off (every
  profile's default): 16-bit dispatch, as Megatron-Core's flex dispatcher hands DeepEP the BF16
  hidden states (``fused_a2a.get_hidden_bytes``: ``max(element_size, 2)``). Only with
  ``moe_deepep``.
- ``moe_hybridep`` — the expert dispatch and combine run on HybridEP (Megatron-Bridge
  ``moe_flex_dispatcher_backend="hybridep"``, on ``moe_hybridep_sms`` SMs):
  ``moe_deepep``'s traffic and flex-dispatcher permute, each level timed at HybridEP's
  published rate where a table covers it (B200 NVLink, GB200 NVL72 by rank count, H100
  InfiniBand), else at the dim's own as ``moe_deepep``; its SMs beside overlapped compute
  (:mod:`~stage_explore.analytical.hybridep`). Not with ``moe_deepep`` (one backend).
- ``moe_hybridep_sms`` (int ≥ 1) — the SMs HybridEP's kernels run on (Megatron-Core
  ``moe_hybridep_num_sms``; default 16, Megatron-Core's): its published rates are read from the
  table of the largest SM count a table has not above it (GB200 NVL72: 16 and 32; B200, H100:
  16), and that many SMs are taken from compute it overlaps. Read under ``moe_hybridep`` only.
- ``moe_hybridep_domain_ranks`` (int ≥ 0) — HybridEP's expert-parallel ranks per NVLink
  domain (``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN``, which Megatron-Core passes to DeepEP's
  ``HybridEPBuffer``): the group runs as ``ep / n`` NVLink domains of ``n`` consecutive group
  ranks, so the backend times every group over the expert-parallel axes as placed that way
  (:mod:`~stage_explore.analytical.ep_domain`), in place of the preset's contiguous placement,
  which can let a group straddle two domains; every other group keeps the preset's placement.
  ``n`` must divide the group and fit a scale-up domain. 0 (every profile's default): the
  preset's placement. Read under ``moe_hybridep`` only.
- ``moe_ep_one_domain`` — every expert-parallel group exchanges its tokens through
  peer-addressable symmetric memory, so each group ran inside one NVLink domain: PyTorch's
  ``symm_mem.rendezvous`` hands the kernels every peer's buffer pointer (``buffer_ptrs``),
  which only GPUs of one NVLink fabric can load from and store to. torchtitan's Dist-MoE
  routed experts do so (meta-pytorch/dist_moe ``dist_moe/_buffers.py`` 18b4f488
  ``SymmetricMemoryBuffer``: "peer pointer arrays … explicit to Triton and CuTe launches";
  its README 191b73f3 lists "hierarchical execution" as not supported). The backend times every
  group over the expert-parallel axes as ``ep`` consecutive ranks of one scale-up domain
  (:func:`~stage_explore.analytical.ep_domain.domain_group` with ``n = ep``), whatever
  dispatcher; every other group keeps the preset's placement. A group larger than a scale-up
  domain is refused (such a run cannot start). Off (every profile's default): the preset's
  placement.
- ``moe_fused_expert_comm`` — the routed experts' dispatch and combine run inside their grouped
  GEMMs: torchtitan's Dist-MoE backend (meta-pytorch/dist_moe ``docs/mxfp8_kernel_design.md``
  ab56bced: the dispatch kernel's "gather/quant warps: peer loads" and the combine kernel's
  "epilogue warps: ... peer stores" share a CTA with the MMA warps), so each expert-parallel
  all-to-all is charged only what the forward / input-gradient expert GEMMs it is fused with do
  not cover, every expert GEMM is charged its kernel alone (the MXFP8 casts are done inside the
  fused kernels, the weights' once per FSDP unshard), and the SwiGLU, its backward and the
  gate / up input-gradient sum between fused GEMMs are not charged
  (:mod:`~stage_explore.analytical.fused_expert_comm`). Off (every profile's default): the
  exchanges, the casts and the element-wise ops as kernels of their own.
- ``moe_fake_balanced_gate`` — the router is NeMo AutoModel's ``FakeBalancedGate``
  (``fake_balanced_gate: true``): token ``t`` goes to the ``k`` consecutive experts
  ``(k·t + j) mod E``, which lie on one or two neighbouring ranks, so DeepEP sends it to far
  fewer ranks and nodes than under random balanced routing (the default, Megatron-Core's
  ``--moe-router-force-load-balancing``: random router logits). DeepEP's traffic depends on
  it, and the experts' GEMMs' row tiles: random routing gives each expert a binomial token
  count (:mod:`~stage_explore.analytical.routing_tiles`), the fake gate exactly the mean.
- ``moe_sort_chunks`` — the MoE tokens go through Megatron-Core's all-to-all token dispatcher
  (``--moe-token-dispatcher-type alltoall``), which sorts the received tokens by local expert
  before the grouped GEMM and back after it (``sort_chunks_by_idxs``, with more than one local
  expert): one more read and write of the routed tokens each way, forward and backward
  (:mod:`~stage_explore.analytical.megatron_dispatch`). Not with ``moe_deepep`` (the flex
  dispatcher permutes the received tokens itself) or the allgather dispatcher. torchtitan's
  default expert parallelism (``ExpertParallel``, ``expert_parallel_degree`` > 1 without
  DeepEP) does the same: ``_permute`` gathers the received tokens by local expert
  (``generate_permute_indices``, ``index_select``) and ``_unpermute`` scatters them back
  (``index_copy_``) before the combine all-to-all.
- ``moe_fp8_padding`` — under an FP8 recipe the MoE experts run as Megatron-Core's
  ``TEGroupedMLP``, which pads every local expert's rows to the FP8 GEMM's alignment (32 under
  MXFP8, else 16) with Transformer Engine's ``Fp8Padding`` before ``linear_fc1`` and strips them
  with ``Fp8Unpadding`` after ``linear_fc2``: under random routing one more read and write of
  the routed tokens each way, forward and backward, whatever the dispatcher
  (:mod:`~stage_explore.analytical.megatron_dispatch`). Off for a run whose router pads the
  routing map instead (``--moe-router-padding-for-fp8``); no effect outside FP8 training.
- ``moe_split_quantize`` — under an FP8 recipe other than delayed scaling the experts' grouped
  GEMMs quantize their operands (input, weights, output gradient) one local expert at a time, a
  cast kernel each: Megatron-Core's ``TEGroupedMLP`` (``--moe-grouped-gemm``) on Transformer
  Engine's ``GroupedLinear`` (``tex.split_quantize``, whose multi-tensor path fuses the splits
  into one kernel only for delayed scaling; :func:`~stage_explore.analytical.fp8_casts.
  split_quantize_kernels`). Each kernel pays the kernel model's ``memory_kernel_s``.
- ``moe_grouped_kernel`` — the routed experts' grouped GEMMs run as one kernel launch over
  every local expert, the per-expert row counts read on the device: Megatron-Core's
  ``TEGroupedMLP`` under ``use_transformer_engine_op_fuser`` (Transformer Engine's fused grouped
  experts, the CuTe DSL grouped MLP on SM100 with ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``), which
  Megatron-Core requires for its CUDA-graph-capturable dropless path (``moe_paged_stash`` with
  ``moe_expert_rank_capacity_factor``: "HybridEP + TE fused grouped experts are required",
  docs.nvidia.com/megatron-core developer guide 0.20.0 ``paged_stash``). Each group then costs
  the kernel model's ``grouped_kernel_group_s`` (the single-launch kernel's per-group time)
  instead of ``grouped_gemm_group_s`` (the multi-stream per-expert loop's), and the FP8
  operands are quantized as one grouped tensor, a cast kernel per operand, not one per local
  expert (``moe_split_quantize`` is not read). Under the ``"megatron-core"`` eager table the
  experts' eager PyTorch (``_apply_bias``'s per-expert down-projection bias loop, GPT-OSS's GLU
  clamp) is not run either: the fused path's Transformer Engine ops do both
  (:mod:`~stage_explore.analytical.eager_megatron`). Off: ``GroupedLinear``'s per-expert path,
  every profile's default.
- ``moe_sequential_mlp`` — the routed experts run as Megatron-Core's ``SequentialMLP`` (Megatron
  without ``--moe-grouped-gemm``, NeMo ``moe_grouped_gemm: false``): one ``MLP`` module per
  local expert, called one after another on ``torch.split`` slices of the received tokens, their
  outputs joined by ``torch.cat`` (``megatron/core/transformer/moe/experts.py``). With more than
  one local expert that is a read and write of the experts' output forward and, in the backward,
  of the experts' input gradient (autograd's ``SplitWithSizesBackward0`` concatenates the slices'
  gradients), each a kernel of its own; and each expert's Transformer Engine linear layers cast
  their own FP8 operands, a cast kernel per expert whatever the recipe
  (:mod:`~stage_explore.analytical.megatron_dispatch`). Off: ``TEGroupedMLP``, what
  ``--moe-grouped-gemm`` runs and every profile's timing so far. Read with the all-to-all
  dispatcher only.
- ``moe_probs_in_activation`` — the router's probabilities scale the experts' activation
  output (the FC2 input) instead of the combined expert outputs, so the combine is a plain
  unpermute that keeps nothing for the backward and the experts' FC2 outputs are not saved:
  Megatron-Core's ``TEGroupedMLP.forward`` passes ``permuted_probs`` into
  ``weighted_bias_swiglu_impl`` (``moe/experts.py``) and the dispatcher unpermutes without
  them. Memory only (the saved bytes of MoE layers whose combine is not recomputed). Off: the
  generator's weighted combine, which saves the expert outputs for the probabilities' gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Bytes per element of an FP8 dispatch message (``moe_fp8_dispatch``): one E4M3 byte and a
#: 4-byte fp32 scale per 128 elements (deepseek-ai/DeepEP ``deep_ep/buffer.py`` ``dispatch``:
#: x as ``[num_tokens, hidden]`` float8_e4m3fn and ``[num_tokens, hidden // 128]`` torch.float;
#: the DeepSeek-V3 report's 1x128 activation tiles, Section 3.3.2).
FP8_DISPATCH_BYTES_PER_ELEMENT = 1.0 + 4.0 / 128

#: Each option of this area and the flag (or config key) the framework exposes it under.
MOE_FLAGS: dict[str, str] = {
    "moe_comm_overlap": "Megatron --overlap-moe-expert-parallel-comm",
    "moe_shared_expert_overlap": "Megatron --moe-shared-expert-overlap",
    "moe_load_imbalance": "MoE routing: max/mean tokens per expert-parallel rank (1 = balanced)",
    "moe_deepep": "Megatron --moe-enable-deepep (flex dispatcher on DeepEP)",
    "moe_fp8_dispatch": "DeepSeek-V3's FP8 dispatch (DeepEP dispatch of FP8 data with 1x128 "
    "fp32 scales; combine in BF16)",
    "moe_hybridep": "Megatron-Bridge moe_flex_dispatcher_backend='hybridep' (flex dispatcher "
    "on HybridEP)",
    "moe_hybridep_sms": "Megatron-Core moe_hybridep_num_sms (HybridEP's SMs; default 16)",
    "moe_hybridep_domain_ranks": "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN (HybridEP's ranks per "
    "NVLink domain; 0 = the preset's placement)",
    "moe_ep_one_domain": "torchtitan Dist-MoE routed experts (symmetric-memory dispatch: each "
    "expert-parallel group in one NVLink domain)",
    "moe_fused_expert_comm": "torchtitan Dist-MoE routed experts (dispatch / combine peer loads "
    "and stores inside the grouped GEMMs, MXFP8 casts and SwiGLU fused)",
    "moe_fake_balanced_gate": "AutoModel fake_balanced_gate (token t to experts k·t … k·t+k−1)",
    "moe_sort_chunks": "Megatron alltoall dispatcher's sort_chunks_by_idxs (local experts > 1); "
    "torchtitan ExpertParallel _permute / _unpermute",
    "moe_fp8_padding": "Megatron TEGroupedMLP Fp8Padding (off: --moe-router-padding-for-fp8)",
    "moe_split_quantize": "Megatron --moe-grouped-gemm: TE GroupedLinear split_quantize",
    "moe_probs_in_activation": "Megatron-Core TEGroupedMLP: router probs in the weighted SwiGLU",
    "moe_sequential_mlp": "Megatron-Core SequentialMLP (without --moe-grouped-gemm)",
    "moe_grouped_kernel": "Megatron-Core use_transformer_engine_op_fuser (TE fused grouped "
    "experts: one launch, device-side expert counts)",
}


@dataclass(frozen=True, kw_only=True)
class MoeOptions:
    """The fields of this area's options (module docstring); a field's default is what a
    profile that does not set it takes."""

    moe_comm_overlap: bool
    moe_shared_expert_overlap: bool
    moe_load_imbalance: float = 1.0  # balanced routing (--moe-router-force-load-balancing)
    moe_deepep: bool = False  # NCCL all-to-all dispatcher, Megatron-Core's default
    moe_fp8_dispatch: bool = False  # 16-bit dispatch messages (Megatron-Core's flex dispatcher)
    moe_hybridep: bool = False  # not HybridEP (its own rates: analytical.hybridep)
    moe_hybridep_sms: int = 16  # Megatron-Core's moe_hybridep_num_sms default
    moe_hybridep_domain_ranks: int = 0  # the preset's contiguous placement of the EP group
    moe_ep_one_domain: bool = False  # the preset's contiguous placement of the EP group
    moe_fused_expert_comm: bool = False  # NCCL all-to-alls and an eager SwiGLU (no Dist-MoE)
    moe_fake_balanced_gate: bool = False  # random balanced routing (Megatron's forced balance)
    moe_sort_chunks: bool = False  # the received tokens land in expert order (no chunk sort)
    moe_fp8_padding: bool = False  # FP8 expert GEMMs take the routed tokens as they are
    moe_split_quantize: bool = False  # one cast kernel per grouped operand (no GroupedLinear)
    moe_probs_in_activation: bool = False  # the weighted combine saves the expert outputs
    moe_sequential_mlp: bool = False  # TEGroupedMLP (--moe-grouped-gemm): no per-expert cat
    moe_grouped_kernel: bool = False  # GroupedLinear's per-expert (multi-stream) path

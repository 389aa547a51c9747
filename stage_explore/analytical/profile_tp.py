"""The framework-profile options of tensor parallelism: how its all-gathers and reduce-scatters
overlap the GEMMs (Transformer Engine's userbuffers, PyTorch's async TP, Megatron's asynchronous
all-reduce) and what DTensor's and torchao's tensor parallelism add: each option's documentation
(below), the framework flag it stands for (:data:`TP_FLAGS`) and its field with the default
(:class:`TensorParallelOptions`, a base of
:class:`~stage_explore.analytical.framework_profile.FrameworkProfile`).

Options (all booleans unless said):

- ``tp_comm_overlap`` — tensor-parallel all-gathers and reduce-scatters are split and
  pipelined with their GEMMs (Megatron ``--tp-comm-overlap``, Transformer Engine userbuffers);
  dependents wait only for the first of ``tp`` chunks.
- ``tp_async_grad_allreduce`` — without sequence parallelism, the backward all-reduce of a
  column-parallel linear's input gradient over tp runs beside that linear's weight-gradient
  GEMM (Megatron ``--async-tensor-model-parallel-allreduce``, on unless
  ``--no-async-tensor-model-parallel-allreduce``; Megatron-DeepSpeed likewise:
  ``LinearWithGradAccumulationAndAsyncCommunication``); its dependents still wait for all of
  it (:mod:`~stage_explore.analytical.async_tp`). Off: on the path, as Megatron-LM of 2021.
- ``tp_saves_gathered_input`` — under sequence parallelism a linear layer's autograd keeps its
  all-gathered input (DTensor tensor parallelism: the ``Shard(1)`` -> ``Replicate``
  redistribute before a ``ColwiseParallel`` linear is an ordinary op whose output the ``mm``
  saves; torchtitan's plans), not the sequence shard Megatron saves and gathers again in the
  backward (:func:`stage_core.lower.memory.gathered_input_bytes`).
- ``float8_tp`` — under the ``tensorwise`` FP8 recipe the tensor-parallel all-gathers of FP8
  linear layers' inputs and output gradients carry FP8 data (torchao's ``Float8ColwiseParallel``
  / ``Float8RowwiseParallel`` / ``PrepareFloat8ModuleInput``, TorchTitan's
  ``enable_float8_tensorwise_tp``), the input cast on the local shard
  (:mod:`~stage_explore.analytical.fp8_gather`). Off: 16-bit gathers unless userbuffers.
- ``te_sp_fp8_gather`` — without userbuffers, Transformer Engine's sequence-parallel
  all-gathers (NCCL, ``gather_along_first_dim``) of FP8 linear layers' inputs, output gradients
  and saved inputs carry the FP8 data the layer quantized on its local shard, as under
  userbuffers; under ``mxfp8`` the output gradients are gathered with both their row- and
  column-wise copies, no fewer bytes than 16-bit, so they stay 16-bit here
  (:mod:`~stage_explore.analytical.fp8_gather`, "TE 2.x's FP8 sequence-parallel gather" in
  docs/analytical.md). Off: a framework whose linear layers are not Transformer Engine's.
- ``funcol_seq_copies`` — DTensor's sequence-parallel all-gathers and reduce-scatters over
  ``tp`` gather / scatter on the sequence dim (``Shard(1)``), which NCCL cannot: PyTorch's
  functional collectives copy the whole gathered tensor (``torch.cat(torch.chunk(res,
  group_size, dim=0), dim=gather_dim)``) or the whole unreduced operand (``torch.cat(torch.chunk(
  self, group_size, dim=scatter_dim))``) on the compute stream
  (``torch/distributed/_functional_collectives.py``; :mod:`~stage_explore.analytical.
  funcol_copies`, which also says what ``torch.compile`` and async TP leave out). Off: Megatron's
  and Transformer Engine's sequence-parallel collectives, which gather and scatter on the
  sequence dim that leads their ``[seq, batch, hidden]`` activations (no copy).
- ``ub_bulk_sm_margin`` — with ``tp_comm_overlap``, the weight-gradient GEMMs beside a
  userbuffers "bulk" reduce-scatter are launched on the SMs its kernel leaves
  (``set_sm_margin``; :func:`~stage_explore.analytical.overlap.sm_margin`). On: Transformer
  Engine's default for a bulk overlap (``initialize_ub``: ``"set_sm_margin": not method ==
  "ring_exchange"``), what Megatron-LM runs without ``--tp-comm-overlap-cfg`` and NeMo without
  ``ub_tp_comm_overlap_cfg``. Off (set per row in setups.toml): a recipe that names one of the
  per-GEMM userbuffers configs, which set ``set_sm_margin`` 0 / False on every bulk overlap
  (NeMo-Framework-Launcher ``conf/training/tp_overlap/ub_cfg_*.yaml``, NeMo
  ``llm/recipes/tp_overlap_configs/userbuffers.py``): the GEMMs keep every SM and lose only the
  kernel's SMs while it runs, ``min(bulk, wgrad) · UB_COMM_SMS / sm_count``
  (:func:`~stage_explore.analytical.overlap.ub_bulk_share_s`).
- ``ub_pipeline_sm_margin`` — the same for the GEMM chunks pipelined with a userbuffers
  reduce-scatter (``proj_fprop``, ``fc2_fprop``). On: Transformer Engine's default since its
  userbuffers refactor (NVIDIA/TransformerEngine#1067, late 2024: ``get_default_config``,
  ``"set_sm_margin": not method == "ring_exchange"``) and every NeMo / Megatron-Bridge config's
  pipelined overlap. Off: the Transformer Engine of mid-2024 (Megatron-Core r0.8; its
  ``module/base.py`` between TransformerEngine#755, April 2024, and #914, June 2024), whose
  ``initialize_ub`` built every default overlap with ``add_ub(..., set_sm_margin: int = 0)``
  (bulk and pipeline alike, the bulk one too: set ``ub_bulk_sm_margin`` off with it); the
  chunks then run on every SM and lose the kernel's SMs only while it runs, as
  ``ub_bulk_share_s`` charges a bulk overlap.
- ``ub_multicast`` — with ``tp_comm_overlap``, Transformer Engine's userbuffers "pipeline"
  and "bulk" kernels (the pipelined forward reduce-scatters, the backward bulk reduce-scatters
  and the bulk all-gathers of a layer's input for its weight gradient) run on CUDA multicast,
  NVLink SHARP's ``multimem.ld_reduce`` / ``multimem.st``, on a GPU of compute capability 9.0
  or newer unless the launch sets ``UB_SKIPMC`` (``create_communicator_grouped2``, TE
  userbuffers-host.cpp), and move ``S`` bytes in their busier direction at the network dim's
  ``nvls_efficiency`` (:mod:`~stage_explore.analytical.ub_multicast`). On: TE's default; a
  dim without ``nvls_efficiency`` (A100) times them as rings either way. Off: ``UB_SKIPMC=1``
  (IPC-handle kernels, timed as rings).
- ``ub_proj_fprop_fp8_buf`` / ``ub_fc2_fprop_fp8_buf`` — with ``tp_comm_overlap`` and an FP8
  run, the recipe sets ``fp8_buf`` on the pipelined ``proj_fprop`` / ``fc2_fprop``
  reduce-scatter (TE ``ub_cfgs``; TE's default is FP8 buffers for the all-gathers only): its
  GEMM chunks write FP8 into the userbuffer and ``reducescatter2_userbuff_stridedoutput_fp8``
  reduces it, one byte per element and without multicast (no FP8 multicast kernel in
  ``userbuffers.cu``; :mod:`~stage_explore.analytical.ub_multicast`). Off: TE's default.
  Honoured by TE 1.6–1.x (NVIDIA/TransformerEngine#750) and from 2.2 (#1633, which restored it
  after the 2.0 refactor).
- ``ub_proj_fprop_atomic_gemm`` / ``ub_fc2_fprop_atomic_gemm`` — with ``tp_comm_overlap`` and
  an FP8 run, the recipe sets ``atomic_gemm`` on the pipelined ``proj_fprop`` / ``fc2_fprop``
  reduce-scatter: one atomic GEMM signals its chunks to ``reducescatter2_userbuff_strided_
  atomic`` / ``_multiatomic`` (TE ``atomic_gemm_overlap_rs``), which have no multicast branch;
  timed as a ring of the buffer's bytes. Off: TE's default.
- ``ub_proj_fprop_method`` / ``ub_fc2_fprop_method`` — with ``tp_comm_overlap``, the
  userbuffers method of the forward reduce-scatter after the attention's output projection /
  the MLP's fc2 (Transformer Engine ``ub_cfgs`` ``proj_fprop`` / ``fc2_fprop`` ``method``).
  ``pipeline``: TE's default (``initialize_ub``: 4 splits, 16 SMs), what
  :mod:`~stage_explore.analytical.overlap` times with :data:`~stage_explore.analytical.overlap.
  UB_PIPELINE_SPLITS`. ``ring_exchange``: ``CommOverlapP2PBase::split_overlap_rs`` — ``tp``
  GEMM chunks, each chunk's partial result sent to its peer by copy engine while the next
  computes, then one reduction kernel over the received chunks; the chunks on
  ``sm_count - 1`` SMs (the recipes' ``num_sm=1, set_sm_margin=True``) and concurrent on any
  queue count. Set per row (setups.toml) where the recipe's userbuffers config names it
  (Megatron-Bridge / NeMo 2.0 ``userbuffers_fp8_*`` configs: both).
- ``cuda_device_max_connections`` — the launch environment's ``CUDA_DEVICE_MAX_CONNECTIONS``
  (hardware work queues per device). 1: Megatron-LM asserts it whenever tp > 1 or cp > 1 before
  Blackwell (``megatron/training/arguments.py`` ``validate_args``: "CUDA_DEVICE_MAX_CONNECTIONS
  requirement no longer exists since the Blackwell architecture", ``get_device_arch_version() <
  10``), NeMo's ``PerfEnvPlugin`` of early 2025 sets it on every GPU; later Megatron-Bridge /
  NeMo performance plugins (``_set_num_cuda_device_max_connections``) set 32 on sm100 and newer
  "to avoid serialization of streams". Only its effect on the userbuffers pipelined
  reduce-scatter is modelled: above 1, the GEMM chunks Transformer Engine issues on three
  streams fill each other's last waves
  (:func:`~stage_explore.analytical.overlap.concurrent_chunks`); at 1 they run in issue order,
  each with its own waves. Set per row (setups.toml) where the recipe's launcher is read.
- ``micro_pipeline_tp`` — with ``tp_comm_overlap``, the overlap is PyTorch's asynchronous TP
  (TorchTitan ``parallelism.enable_async_tensor_parallel``: Inductor's ``_micro_pipeline_tp``
  pass), which fuses only an all-gather read as a GEMM's first operand and a reduce-scatter of
  one GEMM's output; the other tensor-parallel collectives (the backward's reduce-scatters of
  the summed q/k/v and w1/w3 input gradients, the gathers a weight gradient alone reads) stay
  plain collectives on the path
  (:mod:`~stage_explore.analytical.micro_pipeline_tp`). Off: Transformer Engine's userbuffers,
  which overlap every tensor-parallel gather and scatter of a layer.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Each option of this area and the flag (or config key) the framework exposes it under.
TP_FLAGS: dict[str, str] = {
    "tp_comm_overlap": "Megatron --tp-comm-overlap",
    "tp_async_grad_allreduce": "Megatron --async-tensor-model-parallel-allreduce (no SP)",
    "tp_saves_gathered_input": "DTensor TP + SP: a linear saves its all-gathered input",
    "float8_tp": "torchao Float8 TP (enable_float8_tensorwise_tp): FP8 all-gathers",
    "te_sp_fp8_gather": "TE gather_along_first_dim(quantizer=...): FP8 SP all-gathers (NCCL)",
    "funcol_seq_copies": "DTensor SP funcol all-gather / reduce-scatter cat copies (dim 1)",
    "ub_bulk_sm_margin": "TE userbuffers bulk overlap set_sm_margin (ub_tp_comm_overlap_cfg)",
    "ub_pipeline_sm_margin": "TE userbuffers pipelined overlap set_sm_margin (TE >= #1067)",
    "cuda_device_max_connections": "CUDA_DEVICE_MAX_CONNECTIONS (launch environment)",
    "ub_multicast": "TE userbuffers CUDA multicast on sm_90+ (off with UB_SKIPMC=1)",
    "ub_proj_fprop_fp8_buf": "TE userbuffers ub_cfgs proj_fprop fp8_buf (pipeline method)",
    "ub_fc2_fprop_fp8_buf": "TE userbuffers ub_cfgs fc2_fprop fp8_buf (pipeline method)",
    "ub_proj_fprop_atomic_gemm": "TE userbuffers ub_cfgs proj_fprop atomic_gemm",
    "ub_fc2_fprop_atomic_gemm": "TE userbuffers ub_cfgs fc2_fprop atomic_gemm",
    "ub_proj_fprop_method": "TE userbuffers ub_cfgs proj_fprop method",
    "ub_fc2_fprop_method": "TE userbuffers ub_cfgs fc2_fprop method",
    "micro_pipeline_tp": "torchtitan enable_async_tensor_parallel (Inductor _micro_pipeline_tp)",
}

#: The values of ``ub_proj_fprop_method`` / ``ub_fc2_fprop_method``: Transformer Engine's
#: userbuffers methods for a forward reduce-scatter (``initialize_ub``).
UB_RS_METHODS = ("pipeline", "ring_exchange")


@dataclass(frozen=True, kw_only=True)
class TensorParallelOptions:
    """The fields of this area's options (module docstring); a field's default is what a
    profile that does not set it takes."""

    tp_comm_overlap: bool
    tp_async_grad_allreduce: bool = False  # backward tp all-reduces on the path (2021)
    tp_saves_gathered_input: bool = False  # the sequence shard saved, gathered again (Megatron)
    float8_tp: bool = False  # tensor-parallel gathers 16-bit but under userbuffers
    te_sp_fp8_gather: bool = False  # no Transformer Engine linears: 16-bit NCCL SP gathers
    funcol_seq_copies: bool = False  # sequence-dim-first SP collectives (no layout copies)
    ub_bulk_sm_margin: bool = True  # TE's default: bulk-overlapped GEMMs on sm - 16 SMs
    ub_pipeline_sm_margin: bool = True  # TE's default: pipelined GEMM chunks on sm - 16 SMs
    cuda_device_max_connections: int = 1  # one hardware queue: pipelined chunks in order
    ub_multicast: bool = True  # TE's default: pipeline / bulk kernels on NVLink SHARP
    ub_proj_fprop_fp8_buf: bool = False  # TE's default: a 16-bit buffer for the reduce-scatter
    ub_fc2_fprop_fp8_buf: bool = False  # and for fc2_fprop's
    ub_proj_fprop_atomic_gemm: bool = False  # TE's default: no atomic GEMM
    ub_fc2_fprop_atomic_gemm: bool = False
    ub_proj_fprop_method: str = "pipeline"  # TE's default userbuffers method for proj_fprop
    ub_fc2_fprop_method: str = "pipeline"  # and for fc2_fprop
    micro_pipeline_tp: bool = False  # tp_comm_overlap overlaps every tp gather and scatter (TE)

    @property
    def ub_ring_exchange_fprop(self) -> frozenset[str]:
        """The userbuffers names (``proj``, ``fc2``) whose forward reduce-scatter runs as a
        ring exchange (``ub_proj_fprop_method`` / ``ub_fc2_fprop_method``)."""
        methods = {"proj": self.ub_proj_fprop_method, "fc2": self.ub_fc2_fprop_method}
        return frozenset(name for name, method in methods.items() if method == "ring_exchange")

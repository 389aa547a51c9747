"""The userbuffers method of the forward reduce-scatters (``proj_fprop`` / ``fc2_fprop``) an
inferred NeMo 2.0 / Megatron-Bridge row runs (:mod:`stage_explore.validation.infer_megatron`);
below it, the bulk overlaps' SM margin (:data:`BULK_CONFIGS`), the pipelined reduce-scatters'
FP8 buffers (:data:`FP8_BUF_CONFIGS`) and MLPerf GPT-3's atomic GEMMs
(:func:`mlperf_gpt3_forward_scatters`) of the same recipes' configs.

Both frameworks' performance recipes pick one Transformer Engine userbuffers config per model,
GPU and precision (Megatron-Bridge ``scripts/performance`` ``COMM_OVERLAP_CONFIG_MAP``; NeMo
2.0's ``scripts/performance/llm/pretrain_*.py`` naming a ``tp_overlap_configs/userbuffers.py``
config), and the config names each overlap's method. The table below is that map read as
what a row states — the framework (Megatron-Bridge named or not), the GPU, the precision and
the model (family and hidden size) — listing only the configs whose ``proj_fprop`` or
``fc2_fprop`` is a ``RingExchangeOverlapCfg``; any other row keeps Transformer Engine's
default pipeline (``initialize_ub``'s ``methods["pipeline"]``). Sources, as stored:

- NeMo ``nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py`` (NVIDIA/NeMo
  0594a700, 26005325): ``userbuffers_fp8_b200_h8192_tp2`` and ``_h16384_tp4_cp2``,
  ``userbuffers_{bf16,fp8}_b200_h12288_tp4`` and ``userbuffers_bf16_b200_h6144_tp2`` ring both;
  ``userbuffers_bf16_b200_h18432_tp8`` rings ``proj_fprop`` only;
  ``userbuffers_{bf16,fp8}_h100_h12288_tp4`` ring ``fc2_fprop`` only; every H100 Llama config
  (h8192 tp4, h16384 tp8 cp2) and the BF16 B200 Llama configs are pipelines.
- Megatron-Bridge ``src/megatron/bridge/training/comm_overlap.py`` (NVIDIA-NeMo/Megatron-Bridge
  0685ff5d, aae82005): the same configs, but every ``userbuffers_fp8_*`` one (H100 included)
  rings both; ``userbuffers_fp8_b200_h18432_tp8`` (ring both) is read there for NeMo too (the
  stored NeMo copy ends before it). Its ``COMM_OVERLAP_CONFIG_MAP`` (scripts/performance
  utils/helpers.py, three of the four stored versions) gives GB200 FP8 Llama 3 70B the
  ``userbuffers_bf16_b200_h8192_tp2`` config (a pipeline).
- NeMo 2.0's Grok-1 recipe names ``userbuffers_fp8_b200_h16384_tp4_cp2`` on every GPU and
  precision (the DGX Cloud 25.05 Grok-1 rows' setups, s12 ubrs).
"""

from __future__ import annotations

from dataclasses import dataclass

RING = "ring_exchange"
#: Where the two framework options are named (framework_profile.py).
OPTIONS = {"proj": "ub_proj_fprop_method", "fc2": "ub_fc2_fprop_method"}
NEMO_FILE = (
    "NeMo nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py (NVIDIA/NeMo 0594a700)"
)
BRIDGE_FILE = (
    "Megatron-Bridge src/megatron/bridge/training/comm_overlap.py "
    "(NVIDIA-NeMo/Megatron-Bridge aae82005)"
)


@dataclass(frozen=True, slots=True)
class RingConfig:
    """One recipe config with a ring-exchange forward reduce-scatter: the rows it is chosen
    for and which of ``proj`` / ``fc2`` it rings."""

    family: str  #: the model family (``llama``, ``gpt``, ``nemotron``; ``grok-1``: the model named)
    hidden: int  #: the model's hidden size (0: any)
    gpus: str  #: ``hopper``, ``blackwell`` or ``any``
    precisions: tuple[str, ...]
    frameworks: tuple[str, ...]  #: ``nemo`` (NeMo 2.0), ``bridge`` (Megatron-Bridge)
    rings: tuple[str, ...]  #: of ``proj`` / ``fc2``
    config: str
    where: str
    not_systems: tuple[str, ...] = ()  #: presets the map gives another config


BOTH = ("nemo", "bridge")
#: The configs of :mod:`this module <stage_explore.validation.infer_userbuffers>`'s sources,
#: first match wins.
RING_CONFIGS: tuple[RingConfig, ...] = (
    RingConfig("grok-1", 0, "any", ("bf16", "fp8"), ("nemo",), ("proj", "fc2"),
               "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 (NeMo 2.0's Grok-1 "
               "recipe, every GPU and precision)", NEMO_FILE),
    RingConfig("llama", 8192, "blackwell", ("fp8",), ("nemo",), ("proj", "fc2"),
               "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192", NEMO_FILE),
    RingConfig("llama", 8192, "blackwell", ("fp8",), ("bridge",), ("proj", "fc2"),
               "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192", BRIDGE_FILE,
               not_systems=("gb200-nvl72",)),
    RingConfig("llama", 8192, "hopper", ("fp8",), ("bridge",), ("proj", "fc2"),
               "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192", BRIDGE_FILE),
    RingConfig("llama", 16384, "blackwell", ("fp8",), BOTH, ("proj", "fc2"),
               "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192", NEMO_FILE),
    RingConfig("llama", 16384, "hopper", ("fp8",), ("bridge",), ("proj", "fc2"),
               "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192", BRIDGE_FILE),
    RingConfig("gpt", 12288, "blackwell", ("bf16", "fp8"), BOTH, ("proj", "fc2"),
               "userbuffers_{bf16,fp8}_b200_h12288_tp4_mbs1_seqlen2048", NEMO_FILE),
    RingConfig("gpt", 12288, "hopper", ("fp8",), ("bridge",), ("proj", "fc2"),
               "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048", BRIDGE_FILE),
    RingConfig("gpt", 12288, "hopper", ("bf16", "fp8"), BOTH, ("fc2",),
               "userbuffers_{bf16,fp8}_h100_h12288_tp4_mbs1_seqlen2048", NEMO_FILE),
    RingConfig("nemotron", 18432, "blackwell", ("fp8",), BOTH, ("proj", "fc2"),
               "userbuffers_fp8_b200_h18432_tp8_mbs1_seqlen4096", BRIDGE_FILE),
    RingConfig("nemotron", 18432, "blackwell", ("bf16",), BOTH, ("proj",),
               "userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096", NEMO_FILE),
    RingConfig("nemotron", 6144, "blackwell", ("bf16",), BOTH, ("proj", "fc2"),
               "userbuffers_bf16_b200_h6144_tp2_mbs1_seqlen4096", NEMO_FILE),
)  # fmt: skip


def ring_config(
    family: str, hidden: int, gpus: str, system: str, precision: str, bridge: bool
) -> RingConfig | None:
    """The first :data:`RING_CONFIGS` entry a row matches: model ``family`` and ``hidden``
    size, GPU generation ``gpus`` (``hopper`` / ``blackwell``) and preset ``system``,
    ``precision`` (``bf16`` / ``fp8``), Megatron-Bridge named (``bridge``) or NeMo 2.0."""
    framework = "bridge" if bridge else "nemo"
    for entry in RING_CONFIGS:
        if (
            entry.family == family
            and entry.hidden in (0, hidden)
            and entry.gpus in ("any", gpus)
            and precision in entry.precisions
            and framework in entry.frameworks
            and system not in entry.not_systems
        ):
            return entry
    return None


def ring_options(entry: RingConfig) -> tuple[dict[str, str], str]:
    """The framework options an entry sets, and the assumption that says why."""
    options = {OPTIONS[gemm]: RING for gemm in entry.rings}
    named = " and ".join(f"{gemm}_fprop" for gemm in entry.rings)
    kept = [f"{gemm}_fprop" for gemm in OPTIONS if gemm not in entry.rings]
    rest = f"; {kept[0]} the default pipeline" if kept else ""
    note = (
        f"userbuffers {named} as ring-exchange reduce-scatters "
        f"({', '.join(f'{o} = {RING}' for o in options)}){rest}: the performance recipe's "
        f"tp_comm_overlap_cfg for this model, GPU and precision is {entry.config}, "
        f"{entry.where}: {named} = RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True); "
        "Transformer Engine CommOverlapP2PBase::split_overlap_rs runs it"
    )
    return options, note


#: The first container of NeMo-Framework-Launcher's NeMo 1.x model yamls that name a userbuffers
#: config (``defaults: optional tp_overlap@model.ub_tp_comm_overlap_cfg``) and ship Transformer
#: Engine 1.10 or later, whose margin default the config then overrides (the 24.05-24.07 ones
#: run without a margin whatever they name: infer_megatron.MEGATRON_CORE_ERAS).
LAUNCHER_FIRST = (24, 9)
#: The first container of NeMo 2.0's / Megatron-Bridge's performance recipes.
NEMO2_FIRST = (25, 1)
LAUNCHER_DIR = (
    "NeMo-Framework-Launcher launcher_scripts/conf/training/tp_overlap (NVIDIA/"
    "NeMo-Framework-Launcher 0937882d, a3f31000, 5d302f86)"
)


@dataclass(frozen=True, slots=True)
class BulkConfig:
    """A userbuffers config a recipe names for a model on a GPU generation, from a container
    on: each of its four bulk overlaps (``qkv_dgrad``, ``qkv_wgrad``, ``fc1_dgrad``,
    ``fc1_wgrad``) sets ``set_sm_margin`` False / 0."""

    family: str  #: as :class:`RingConfig`
    hidden: int  #: 0: any
    gpus: str  #: ``hopper``, ``blackwell`` or ``any``
    first: tuple[int, int]  #: the first container whose recipe names it
    config: str
    where: str


#: The configs of the performance recipes by model, GPU and era, first match wins. NeMo 2.0's
#: ``tp_overlap_configs/userbuffers.py`` and Megatron-Bridge's ``comm_overlap.py`` (the stored
#: files named above) declare every ``BulkOverlapCfg`` with ``set_sm_margin=False``;
#: every NeMo-Framework-Launcher ``tp_overlap/ub_cfg_*.yaml`` (all H100) sets ``set_sm_margin:
#: 0`` on its bulk overlaps. A row of another model keeps Transformer Engine's default.
BULK_CONFIGS: tuple[BulkConfig, ...] = (
    BulkConfig("grok-1", 0, "any", NEMO2_FIRST,
               "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 (NeMo 2.0's "
               "pretrain_grok1_314b.py, every GPU and precision)", NEMO_FILE),
    BulkConfig("llama", 8192, "hopper", LAUNCHER_FIRST,
               "ub_cfg_h100_h8192_tp4_mbs1_seqlen8192 (llama/llama3_1_70b.yaml defaults; "
               "NeMo 2.0 / Megatron-Bridge: userbuffers_{bf16,fp8}_h100_h8192_tp4_mbs1_seqlen8192)",
               f"{LAUNCHER_DIR}; {NEMO_FILE}; {BRIDGE_FILE}"),
    BulkConfig("llama", 16384, "hopper", LAUNCHER_FIRST,
               "ub_cfg_h100_{bf16,fp8}_h16384_tp8_cp2_mbs1_seqlen8192 (llama/llama3_1_405b.yaml "
               "defaults; NeMo 2.0 / Megatron-Bridge: "
               "userbuffers_{bf16,fp8}_h100_h16384_tp8_cp2_mbs1_seqlen8192)",
               f"{LAUNCHER_DIR}; {NEMO_FILE}; {BRIDGE_FILE}"),
    BulkConfig("gpt", 12288, "hopper", LAUNCHER_FIRST,
               "ub_cfg_h100_h12288_tp4_mbs2_seqlen2048 (named by the launcher's Training."
               "_get_ub_cfg_override from GPU, hidden size, tp, micro-batch and sequence length; "
               "NeMo 2.0: userbuffers_{bf16,fp8}_h100_h12288_tp4_mbs1_seqlen2048)",
               f"{LAUNCHER_DIR}; {NEMO_FILE}"),
    BulkConfig("llama", 8192, "blackwell", NEMO2_FIRST,
               "userbuffers_{bf16,fp8}_b200_h8192_tp2_mbs1_seqlen8192",
               f"{NEMO_FILE}; {BRIDGE_FILE}"),
    BulkConfig("llama", 16384, "blackwell", NEMO2_FIRST,
               "userbuffers_{bf16,fp8}_b200_h16384_tp4_cp2_mbs1_seqlen8192",
               f"{NEMO_FILE}; {BRIDGE_FILE}"),
    BulkConfig("gpt", 12288, "blackwell", NEMO2_FIRST,
               "userbuffers_{bf16,fp8}_b200_h12288_tp4_mbs1_seqlen2048", NEMO_FILE),
    BulkConfig("nemotron", 6144, "blackwell", NEMO2_FIRST,
               "userbuffers_bf16_b200_h6144_tp2_mbs1_seqlen4096", NEMO_FILE),
    BulkConfig("nemotron", 18432, "blackwell", NEMO2_FIRST,
               "userbuffers_{bf16,fp8}_b200_h18432_tp8_mbs1_seqlen4096",
               f"{NEMO_FILE}; {BRIDGE_FILE}"),
)  # fmt: skip


def bulk_config(
    family: str, hidden: int, gpus: str, release: tuple[int, int]
) -> BulkConfig | None:
    """The first :data:`BULK_CONFIGS` entry a row of model ``family`` / ``hidden`` on GPU
    generation ``gpus`` in container ``release`` matches."""
    for entry in BULK_CONFIGS:
        if (
            entry.family == family
            and entry.hidden in (0, hidden)
            and entry.gpus in ("any", gpus)
            and release >= entry.first
        ):
            return entry
    return None


def bulk_note(entry: BulkConfig) -> str:
    """The assumption of a bulk-margin default read from ``entry``."""
    return (
        "userbuffers bulk overlaps without an SM margin (ub_bulk_sm_margin false): the "
        f"recipe's userbuffers config for this model and GPU is {entry.config}, {entry.where}: "
        "its qkv_dgrad, qkv_wgrad, fc1_dgrad and fc1_wgrad bulk overlaps set set_sm_margin "
        "False / 0, so the GEMMs beside them keep every SM"
    )


#: The framework options of the pipelined forward reduce-scatters' FP8 buffers and atomic GEMMs
#: (framework_profile.py; "Review of the userbuffers multicast (s13 ubreview)").
FP8_BUF = {"proj": "ub_proj_fprop_fp8_buf", "fc2": "ub_fc2_fprop_fp8_buf"}
ATOMIC = {"proj": "ub_proj_fprop_atomic_gemm", "fc2": "ub_fc2_fprop_atomic_gemm"}
#: The NeMo 1.x containers whose Transformer Engine 1.x builds an ``fp8_buf`` pipeline overlap as
#: a uint8 buffer under FP8 (since NVIDIA/TransformerEngine#750, April 2024): 24.07 (TE 1.8) to
#: the last launcher container; 24.05's TE 1.6.0.dev0 not read, so not assumed.
LAUNCHER_FP8_BUF = ((24, 7), (24, 12))
#: The NeMo 2.0 containers whose TE (2.2 on, #1633) takes the FP8 GEMM output into the buffer
#: again; TE 2.0 / 2.1 (NeMo 25.01 / 25.02) had dropped it (what they wrote not read: not assumed).
NEMO2_FP8_BUF = ((25, 4), (99, 12))
FP8_BUF_NOTE = (
    "Transformer Engine builds an fp8_buf pipeline overlap as a torch.uint8 buffer under FP8 "
    "(initialize_ub: fp8_buf = name in layers_all_gather_overlap or (cfg fp8_buf and name in "
    "methods[pipeline]); TE 1.x since NVIDIA/TransformerEngine#750, TE 2.2 on after #1633), the "
    "GEMM chunks write FP8 and split_overlap_rs calls reducescatter2_userbuff_stridedoutput_fp8 "
    "(1 byte per element, no multicast branch in userbuffers.cu)"
)


@dataclass(frozen=True, slots=True)
class Fp8BufConfig:
    """An H100 FP8 userbuffers config a recipe names whose pipelined ``proj_fprop`` /
    ``fc2_fprop`` set ``fp8_buf``: the rows it is chosen for and which GEMMs it sets it on."""

    family: str  #: as :class:`RingConfig`
    hidden: int
    seq_len: int  #: the sequence length the config is named for (0: any)
    releases: tuple[tuple[int, int], tuple[int, int]]  #: first and last container
    gemms: tuple[str, ...]  #: of ``proj`` / ``fc2``
    config: str
    where: str


#: Every stored H100 FP8 config that sets ``fp8_buf`` on a pipelined forward reduce-scatter
#: (no Blackwell config does: their FP8 ones ring both). A row of another model, GPU, precision
#: or container keeps TE's 16-bit buffer.
FP8_BUF_CONFIGS: tuple[Fp8BufConfig, ...] = (
    Fp8BufConfig("llama", 8192, 8192, LAUNCHER_FP8_BUF, ("proj", "fc2"),
                 "ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192.yaml (the launcher's FP8 Llama 3 70B "
                 "scripts, examples/training/llama/h100/llama3_70b_fp8.sh)",
                 "NeMo-Framework-Launcher launcher_scripts/conf/training/tp_overlap "
                 "(NVIDIA/NeMo-Framework-Launcher 1015f23b)"),
    Fp8BufConfig("llama", 16384, 8192, LAUNCHER_FP8_BUF, ("proj", "fc2"),
                 "ub_cfg_h100_fp8_h16384_tp8_cp2_mbs1_seqlen8192.yaml (the launcher's FP8 Llama "
                 "3.1 405B runs)",
                 "NeMo-Framework-Launcher launcher_scripts/conf/training/tp_overlap "
                 "(NVIDIA/NeMo-Framework-Launcher 0937882d)"),
    Fp8BufConfig("llama", 8192, 0, NEMO2_FP8_BUF, ("proj", "fc2"),
                 "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192", NEMO_FILE),
    Fp8BufConfig("llama", 16384, 0, NEMO2_FP8_BUF, ("proj", "fc2"),
                 "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192", NEMO_FILE),
    Fp8BufConfig("gpt", 12288, 0, NEMO2_FP8_BUF, ("proj",),
                 "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048", NEMO_FILE),
)  # fmt: skip


def fp8_buf_config(
    family: str, hidden: int, seq_len: int, release: tuple[int, int]
) -> Fp8BufConfig | None:
    """The first :data:`FP8_BUF_CONFIGS` entry an H100 FP8 row of model ``family`` /
    ``hidden``, sequence length ``seq_len`` (0: not stated, any) in container ``release``
    matches."""
    for entry in FP8_BUF_CONFIGS:
        first, last = entry.releases
        if (
            entry.family == family
            and entry.hidden == hidden
            and (entry.seq_len in (0, seq_len) or not seq_len)
            and first <= release <= last
        ):
            return entry
    return None


def fp8_buf_options(
    entry: Fp8BufConfig, methods: dict[str, object]
) -> tuple[dict[str, bool], str]:
    """The ``fp8_buf`` options an entry sets on the GEMMs the row runs as pipelines (not on
    one the ``methods`` already ring: TE takes ``fp8_buf`` only on a pipeline), and why."""
    gemms = [g for g in entry.gemms if methods.get(OPTIONS[g]) != RING]
    options = {FP8_BUF[gemm]: True for gemm in gemms}
    named = " and ".join(f"{gemm}_fprop" for gemm in gemms)
    note = (
        f"the pipelined {named} reduce-scatters on FP8 userbuffers "
        f"({', '.join(options)}): the recipe's userbuffers config for this model on H100 in FP8 "
        f"is {entry.config}, {entry.where}: {named} method pipeline with fp8_buf set; "
        f"{FP8_BUF_NOTE}"
    )
    return options, note


#: NVIDIA's MLPerf GPT-3 175B H100 implementation on NeMo 1.x (v4.0 / v4.1).
MLPERF_TP_OVERLAP = (
    "conf/tp_overlap/h100tp4mbs2.yaml (mlcommons/training_results_v4.0 62f111b7; the v4.1 copy "
    "swsok/training_results_v4.1 8821c703 the same): proj_fprop method pipeline, atomic_gemm "
    "${NVTE_UB_ATOMIC_GEMM_RS_PROJ,1}, fp8_buf ${NVTE_UB_FP8_RS,False}; fc2_fprop method "
    "${FC2_FPROP_METHOD,ring_exchange}, atomic_gemm ${NVTE_UB_ATOMIC_GEMM_RS_FC2,0}"
)


def mlperf_gpt3_forward_scatters(micro_batch: int) -> tuple[dict[str, bool | str], str]:
    """The forward reduce-scatters of NVIDIA's MLPerf GPT-3 H100 FP8 submissions: the
    micro-batch-2 configs leave h100tp4mbs2.yaml's defaults (``proj_fprop`` atomic GEMM,
    ``fc2_fprop`` ring exchange); the micro-batch-1 CUDA-graph configs of the 1344 / 1452-node
    runs (``config_DGXH100_*x6x4x6_mbs1_cg.sh``) export ``NVTE_UB_FP8_RS=1``,
    ``NVTE_UB_ATOMIC_GEMM_RS_PROJ=0``, ``FC2_FPROP_METHOD=pipeline``,
    ``NVTE_UB_ATOMIC_GEMM_RS_FC2=1``."""
    if micro_batch == 1:
        options: dict[str, bool | str] = {FP8_BUF["proj"]: True, ATOMIC["fc2"]: True}
        what = (
            "proj_fprop pipelined on an FP8 buffer (ub_proj_fprop_fp8_buf) and fc2_fprop as an "
            "atomic-GEMM pipelined reduce-scatter (ub_fc2_fprop_atomic_gemm: "
            "reducescatter2_userbuff_strided_multiatomic, no multicast): the micro-batch-1 "
            "configs (config_DGXH100_1344x8x6x4x6_mbs1_cg.sh, _1452x8x6x4x6_mbs1_cg.sh, "
            "mlcommons/training_results_v4.0 62f111b7) export NVTE_UB_FP8_RS=1, "
            "NVTE_UB_ATOMIC_GEMM_RS_PROJ=0, FC2_FPROP_METHOD=pipeline, "
            f"NVTE_UB_ATOMIC_GEMM_RS_FC2=1 into {MLPERF_TP_OVERLAP}; {FP8_BUF_NOTE}"
        )
        return options, what
    options = {ATOMIC["proj"]: True, OPTIONS["fc2"]: RING}
    what = (
        "proj_fprop as an atomic-GEMM pipelined reduce-scatter (ub_proj_fprop_atomic_gemm: "
        "reducescatter2_userbuff_strided_atomic on a 16-bit buffer, no multicast) and fc2_fprop "
        f"as a ring exchange (ub_fc2_fprop_method = {RING}): the micro-batch-2 configs set none "
        f"of the variables of {MLPERF_TP_OVERLAP}; config_common.sh (henrique/"
        "training_results_v4.0 1316e93c) exports NVTE_RS_STRIDED_ATOMIC=1"
    )
    return options, what

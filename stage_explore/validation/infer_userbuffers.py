"""The userbuffers method of the forward reduce-scatters (``proj_fprop`` / ``fc2_fprop``) an
inferred NeMo 2.0 / Megatron-Bridge row runs (:mod:`stage_explore.validation.infer_megatron`).

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

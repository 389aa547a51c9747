"""The expert dispatch of Megatron-Bridge's MoE performance configs for an inferred row: HybridEP
where a 26.xx config of the row's layout sets it (:func:`bridge_hybridep`, 6 Dec 2026, s21
mbxrecipe), and the Qwen3 configs' expert-parallel all-to-all overlap (:func:`qwen3_a2a_overlap`,
5 Dec 2026, s14 infer5; GB200 / GB300 corrected in s21 mbxrecipe).

*HybridEP.* From the 26.xx containers Megatron-Bridge's ``scripts/performance/configs`` set
``moe_flex_dispatcher_backend="hybridep"`` on many MoE layouts, and the per-GPU config functions
switch ``moe_token_dispatcher_type`` to ``"flex"`` for them (``configs/qwen/qwen3_llm_pretrain.py``
``qwen3_30b_a3b_pretrain_config_*``: ``cfg.model.moe_flex_dispatcher_backend =
base_cfg.moe_flex_dispatcher_backend``, ``moe_token_dispatcher_type = "flex"``). The 25.11-era
files (``configs/qwen3/workload_base_configs.py``, ``configs/deepseek/workload_base_configs.py``,
NVIDIA-NeMo/Megatron-Bridge 0fa501ac) have no such field (``utils/utils.py``
``WorkloadBaseConfig`` there has none), so only rows of a 26.xx container take it.

HybridEP (DeepEP's ``hybrid_ep`` backend, NVIDIA) moves the tokens as DeepEP's normal kernels
do: "Similar to DeepEP, Hybrid-EP first performs IB communication between peer GPUs, then each
rank distributes the received inter-node data locally" (deepseek-ai/DeepEP
``docs/Hybrid-EP_Implementation.md`` §8, 0b18ed2a); its RDMA token buffer holds
``max_tokens_per_rank × (num_nodes − 1)`` tokens (§4.2: each token at most once per remote node)
and its dispatch returns each rank the "tokens for local experts", permuted to them there (§2,
§7.2: once per destination rank). That is the traffic the model's ``moe_deepep`` costs
(:mod:`~stage_explore.analytical.deepep`). Such a row takes ``moe_hybridep`` (6 Dec 2026, s21
hybridep): that traffic at HybridEP's own published rates where a table covers the level
(:mod:`~stage_explore.analytical.hybridep`), on 32 SMs (``moe_hybridep_sms``, 6 Dec 2026, s22
bridgeaudit): the scripts' common overrides set ``moe_hybridep_num_sms = 32`` whenever the
backend is HybridEP (``scripts/performance/utils/overrides.py`` ``_set_common_perf_overrides``,
NVIDIA-NeMo/Megatron-Bridge 00538e26, "TODO: This needs to be adjusted when overlapping HybridEP
with computation or the number of SMs for HybridEP is reduced"), run last in
``set_workload_base_configs``, which every per-GPU config function calls after it has set the
backend (``configs/qwen/qwen3_llm_pretrain.py`` 05c0c90f: ``cfg.model.moe_flex_dispatcher_backend
= base_cfg.moe_flex_dispatcher_backend`` first; ``configs/gpt_oss/gpt_oss_llm_pretrain.py``
0501207b: ``apply_flex_dispatcher_backend`` first; ``configs/deepseek/deepseek_llm_pretrain.py``
``deepseek_v3_pretrain_config_gb200`` and the other GPUs alike). Megatron-Core's own default, 16,
is what these runs did not use.

*Which Qwen3 config family a container ran* (7 Dec 2026, s29 qwen2509). Megatron-Bridge's Qwen3
performance configs came in two families: the earlier ``scripts/performance/configs/qwen3/``
(``qwen3_235b_a22b_llm_pretrain.py`` / ``.yaml``, ``qwen3_30b_a3b_llm_pretrain.py``, then
``workload_base_configs.py`` with ``qwen3_llm_pretrain.py``) and the later ``configs/qwen/``
(``qwen3_workload_base_configs.py``, whose H100 / B200 / B300 layouts with a virtual pipeline set
``moe_a2a_overlap=True``). The 25.09 container's runs read the earlier one:

- the 25.09 NeMo container carries Megatron-Bridge 0.1.0 (NVIDIA-NeMo/Megatron-Bridge PR #317
  "Major dependency bump for 25.09", PR #862 "Add 0.1.0rc3 changelog" of 3 Oct 2025 on the
  r0.1.0 branch, release v0.1.0rc4 of 23 Oct 2025 "Update performance scripts");
- its table was on the performance-summary page by 17 Oct 2025 (issue #444, ananthsub:
  "performance summaries across container versions are published here"; PRs #915 "perf page
  update 25.09 draft" and #916 "update 25.09 performance summary");
- main's Qwen3 configs were still the earlier family a month later: on 21 Nov 2025 PR #1451
  ("Added Qwen 3 next perf scripts") edits ``scripts/performance/configs/qwen3/
  workload_base_configs.py`` and its review reads names through that file's ``utils.py``.

No stored version of the earlier family turns the all-to-all overlap on by itself:
``qwen3_30b_a3b_llm_pretrain.py`` (4054233a) ``A2A_1F1B = False if kwargs.get("moe_a2a") is
None``; ``qwen3_235b_a22b_llm_pretrain.py`` (27dfb3df) and ``.yaml`` (11d3a36e) set none;
``workload_base_configs.py`` / ``qwen3_llm_pretrain.py`` (0fa501ac) have no such field and
``utils/helpers.py`` applies ``set_moe_a2a_overlap_overrides`` only from the launcher's
``moe_a2a_overlap`` argument. Every one builds ``CommOverlapConfig(tp_comm_overlap=True)``. The
same family's default token drop (``use_tokendrop`` True: ``apply_moe_token_drop``) is the 25.09
table's "(tokendrop)" label, and the maintainers' later notes compare against it: issue #1998
("the perf in 25.11 is 2X slower than 25.09", Qwen3-30B on H100 / B200, dropless against token
drop) and PR #1760 (17 Dec 2025: the B200 Qwen3-235B config's "performance regression from
25.09", fixed by disabling ``moe_a2a_overlap``). A launcher argument could still have turned the
overlap on; the page does not say so, and the reader takes the config's default as it does for
every row (:func:`qwen3_a2a_overlap`)."""

from __future__ import annotations

from dataclasses import dataclass

from stage_explore.validation.infer_release import Defaults

#: HybridEP's SMs in Megatron-Bridge's performance runs (module docstring).
BRIDGE_HYBRIDEP_SMS = 32

#: The first container whose Megatron-Bridge performance configs set HybridEP (module docstring).
FIRST_HYBRIDEP = (26, 1)


@dataclass(frozen=True)
class HybridEpConfig:
    """The layouts of one model × GPU whose Megatron-Bridge performance config sets
    ``moe_flex_dispatcher_backend`` to ``backend`` (``"hybridep"``, or ``"deepep"``: DeepEP's own
    kernels, ``moe_deepep``): ``layouts`` as (pp, vpp, ep, micro_batch). Where a layout alone
    cannot tell the config from one that sets no backend, ``recipes`` (the FP8 recipes it is
    read for, ``""`` for BF16; empty: any) and ``global_batch`` (0: any) narrow it."""

    flavor: str
    system: str
    layouts: tuple[tuple[int, int, int, int], ...]
    why: str
    backend: str = "hybridep"
    recipes: tuple[str, ...] = ()
    global_batch: int = 0


BRIDGE = "NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs"
QWEN3 = f"{BRIDGE}/qwen/qwen3_workload_base_configs.py"
DSV3 = f"{BRIDGE}/deepseek/deepseek_workload_base_configs.py"

#: Every stored config that sets HybridEP (or, on its own layout, DeepEP), keyed on the layout a
#: row states.
BRIDGE_HYBRIDEP: tuple[HybridEpConfig, ...] = (
    HybridEpConfig("qwen3-30b-a3b", "gb300-nvl72", ((1, 1, 8, 8),),
                   f"{QWEN3} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_*_V1 (01b2977e; "
                   "okoge-kaz 58f04619 and ananthsub 2effdfa3 alike): MBS 8, EP 8"),
    HybridEpConfig("qwen3-30b-a3b", "gb200-nvl72", ((1, 1, 8, 4),),
                   f"{QWEN3} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_*_V1 (01b2977e; "
                   "okoge-kaz 58f04619 alike): MBS 4, EP 8"),
    HybridEpConfig("qwen3-30b-a3b", "b300", ((1, 1, 8, 8),),
                   f"{QWEN3} QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_*_V1 (01b2977e): MBS 8, EP 8"),
    HybridEpConfig("qwen3-30b-a3b", "b200", ((1, 1, 8, 4),),
                   f"{QWEN3} QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_BF16_V1 and its FP8 aliases "
                   "(01b2977e): MBS 4, EP 8 (the earlier B200 config at MBS 1, okoge-kaz "
                   "58f04619, sets no backend)"),
    HybridEpConfig("qwen3-30b-a3b", "h100-80gb", ((1, 1, 16, 1),),
                   f"{QWEN3} QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 / BF16_V1 (01b2977e): "
                   "16 GPUs, EP 16, moe_a2a_overlap False (the earlier H100 config, PP 2 VP 12, "
                   "sets no backend)"),
    HybridEpConfig("qwen3-235b-a22b", "gb300-nvl72", ((1, 1, 64, 2), (4, 1, 32, 2), (4, 12, 32, 2)),
                   f"{QWEN3} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_*_V1 (EP 64, MBS 2) and _V2 "
                   "(PP 4, EP 32; FP8_MX VP 12) (01b2977e)"),
    HybridEpConfig("qwen3-235b-a22b", "gb200-nvl72", ((8, 1, 8, 1), (8, 1, 32, 1), (8, 3, 32, 1)),
                   f"{QWEN3} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_*_V1 (PP 8, EP 8) and _V2 "
                   "(EP 32; FP8_MX VP 3) (01b2977e); the B200 / B300 / H100 configs set "
                   "moe_token_dispatcher_type 'alltoall'"),
    HybridEpConfig("deepseek-v3", "b200", ((16, 1, 8, 1),),
                   f"{DSV3} DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V1 (PP 16, EP 8; 04264182)"),
    HybridEpConfig("deepseek-v3", "b200", ((8, 2, 32, 1),),
                   f"{DSV3} DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 / NVFP4_V2 (PP 8 VP 2, "
                   "EP 32; 04264182; no B200 config of f0e2c37e has the layout)", "deepep"),
    HybridEpConfig("deepseek-v3", "b300", ((16, 1, 8, 1), (8, 2, 8, 1), (8, 2, 8, 2)),
                   f"{DSV3} DEEPSEEK_V3_PRETRAIN_CONFIG_B300_V1 at PP 16 EP 8 (f0e2c37e), its "
                   "BF16_V2 at PP 8 VP 2 (f0e2c37e); B300_V1 at PP 8 VP 2 EP 8 and NVFP4_V1 at "
                   "MBS 2 (04264182)"),
    HybridEpConfig("deepseek-v3", "gb200-nvl72", ((4, 4, 64, 1),),
                   f"{DSV3} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V1 and its BF16 / FP8 variants "
                   "(PP 4 VP 4, EP 64; 04264182)"),
    HybridEpConfig("deepseek-v3", "gb300-nvl72", ((2, 8, 32, 2), (2, 8, 32, 1), (4, 4, 64, 1)),
                   f"{DSV3} DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1 (PP 2 VP 8, EP 32, MBS 2), "
                   "FP8_MX_V1 (MBS 1) and BF16_V1 (PP 4 VP 4, EP 64, MBS 1) (04264182; "
                   "f0e2c37e alike)"),
    HybridEpConfig("deepseek-v3", "h100-80gb", ((8, 4, 64, 1), (8, 2, 64, 1)),
                   f"{DSV3} DEEPSEEK_V3_PRETRAIN_CONFIG_H100_V1 / V2 (PP 8 VP 4, EP 64) and "
                   "H100_FP8_SC_V2 (VP 2) (04264182, f0e2c37e alike), read by "
                   "deepseek_llm_pretrain.py deepseek_v3_pretrain_config_h100 (69655bff: "
                   "cfg.model.moe_flex_dispatcher_backend = base_cfg.moe_flex_dispatcher_backend)"),
    HybridEpConfig("gpt-oss-120b", "b300", ((1, 1, 8, 4),),
                   "NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/gpt_oss/"
                   "gpt_oss_workload_base_configs.py GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2 "
                   "(EP 8, MBS 4; 07eea52d); the EP 64 configs and B200 V2 set no backend"),
    HybridEpConfig("gpt-oss-120b", "gb300-nvl72", ((1, 1, 16, 4),),
                   "NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/gpt_oss/"
                   "gpt_oss_workload_base_configs.py GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 "
                   "(EP 16, MBS 4; 07eea52d)"),
    HybridEpConfig("gpt-oss-120b", "gb200-nvl72", ((1, 1, 64, 4),),
                   "NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/gpt_oss/"
                   "gpt_oss_workload_base_configs.py GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 "
                   "(EP 64, MBS 4, GBS 1280; 07eea52d); the GB200 BF16 configs and FP8_MX_V1 (GBS "
                   "512) at that layout set no backend there, so the MXFP8 recipe and GBS 1280 "
                   "are keyed too", recipes=("mxfp8",), global_batch=1280),
)  # fmt: skip


def bridge_hybridep(
    flavor: str,
    system: str,
    release: tuple[int, int],
    stated: dict[str, int],
    out: Defaults,
    recipe: str = "",
) -> bool:
    """Time a Megatron-Bridge row's expert dispatch as HybridEP (``moe_hybridep``, module
    docstring) when its container is 26.01 or later and the layout it states is one of
    :data:`BRIDGE_HYBRIDEP`'s (as DeepEP, ``moe_deepep``, where that config's backend is
    ``"deepep"``); whether it did (the caller checks the text names Megatron-Bridge). A row
    that sets ``moe_deepep`` or ``moe_hybridep`` itself is left alone. ``recipe``: the row's FP8
    recipe, ``""`` for BF16 (read where an entry keys :attr:`HybridEpConfig.recipes`)."""
    if release < FIRST_HYBRIDEP or {"moe_deepep", "moe_hybridep"} & set(out.options):
        return False
    get = stated.get
    layout = (get("pp", 1), get("vpp", 1), get("ep", 1), get("micro_batch", 1))
    for config in BRIDGE_HYBRIDEP:
        if (
            config.flavor == flavor
            and config.system == system
            and layout in config.layouts
            and (not config.recipes or recipe in config.recipes)
            and config.global_batch in (0, get("global_batch_seqs", 0))
        ):
            if config.backend == "deepep":
                out.options["moe_deepep"] = True
                out.notes.append(
                    "the expert dispatch on DeepEP (moe_deepep): moe_flex_dispatcher_backend "
                    f"'deepep' in {config.why}, the row's layout PP {layout[0]} VP {layout[1]} EP "
                    f"{layout[2]} MBS {layout[3]} (the text names Megatron-Bridge container "
                    f"{release[0]}.{release[1]:02d})"
                )
                return True
            out.options["moe_hybridep"] = True
            out.options["moe_hybridep_sms"] = BRIDGE_HYBRIDEP_SMS
            out.notes.append(
                "the expert dispatch on HybridEP (moe_hybridep): DeepEP's traffic (a token sent "
                "once per destination rank over NVLink and once per destination node across "
                "nodes; deepseek-ai/DeepEP docs/Hybrid-EP_Implementation.md 0b18ed2a §8 "
                "'Similar to DeepEP, Hybrid-EP first performs IB communication between peer "
                "GPUs, then each rank distributes the received inter-node data locally') at "
                "HybridEP's published rates where docs/README_Hybrid-EP.md has a table (B200 "
                "NVLink, GB200 NVL72, H100 InfiniBand), else the link's DeepEP rate, on "
                f"{BRIDGE_HYBRIDEP_SMS} SMs (moe_hybridep_sms; the table of the most SMs not "
                "above it: GB200's 32-SM columns, the other tables' 16): "
                "scripts/performance/utils/overrides.py _set_common_perf_overrides "
                "moe_hybridep_num_sms = 32 under HybridEP (NVIDIA-NeMo/Megatron-Bridge 00538e26); "
                f"moe_flex_dispatcher_backend 'hybridep' in {config.why}, the row's layout PP "
                f"{layout[0]} VP {layout[1]} EP {layout[2]} MBS {layout[3]} (the text names "
                f"Megatron-Bridge container {release[0]}.{release[1]:02d})"
            )
            return True
    return False


#: The last container whose Megatron-Bridge Qwen3 performance runs read the earlier config family,
#: ``scripts/performance/configs/qwen3/`` (module docstring: 25.09 = Megatron-Bridge 0.1.0, its
#: table published by 17 Oct 2025, main's Qwen3 configs still ``configs/qwen3/`` on 21 Nov 2025).
LAST_EARLY_QWEN3_FAMILY = (25, 9)

#: Systems whose Megatron-Bridge Qwen3 performance configs never set moe_a2a_overlap, in any
#: stored version, whatever their virtual pipeline (WorkloadBaseConfig's default False).
NO_QWEN3_A2A_OVERLAP = ("gb200-nvl72", "gb300-nvl72")


def qwen3_a2a_overlap(
    family: str,
    moe: bool,
    stated: dict[str, int],
    system: str,
    out: Defaults,
    release: tuple[int, int] | None = None,
) -> None:
    """Megatron-Bridge's Qwen3 MoE performance configs switch the expert-parallel all-to-all
    overlap where they interleave the pipeline on H100 / B200 / B300 (5 Dec 2026, s14 infer5),
    never on GB200 / GB300 (6 Dec 2026, s21 mbxrecipe), and never in the earlier config family
    a container up to :data:`LAST_EARLY_QWEN3_FAMILY` ran (7 Dec 2026, s29 qwen2509; module
    docstring); read when the row states its pipeline and virtual pipeline sizes. ``release``:
    the container the text names (``None``: not named, read as the later family)."""
    if family != "qwen3" or not moe or "vpp" not in stated or out.options.get("moe_grouped_kernel"):
        return  # the full-iteration recipes set the overlap themselves (infer_bridge_graphs)
    pp, vpp = int(stated.get("pp", 1)), int(stated["vpp"])
    if pp <= 1:
        return
    if release is not None and release <= LAST_EARLY_QWEN3_FAMILY:
        out.options["moe_comm_overlap"] = False
        out.notes.append(
            f"no expert-parallel all-to-all overlap (moe_comm_overlap false: pp {pp}, vpp {vpp}, "
            f"container {release[0]}.{release[1]:02d}): the {release[0]}.{release[1]:02d} "
            "runs read Megatron-Bridge's earlier Qwen3 configs, scripts/performance/configs/qwen3/ "
            "(25.09 = Megatron-Bridge 0.1.0, PR #862 r0.1.0; its table published by 17 Oct 2025, "
            "issue #444; main's Qwen3 configs still configs/qwen3/ on 21 Nov 2025, PR #1451), "
            "none of whose stored versions sets the overlap by itself "
            "(qwen3_30b_a3b_llm_pretrain.py 4054233a A2A_1F1B False unless the launcher passes "
            "moe_a2a; "
            "qwen3_235b_a22b_llm_pretrain.py 27dfb3df none; workload_base_configs.py 0fa501ac no "
            "field, utils/helpers.py set_moe_a2a_overlap_overrides only from the launcher's "
            "moe_a2a_overlap argument), which the page does not name (the text names "
            "Megatron-Bridge)"
        )
        return
    if system in NO_QWEN3_A2A_OVERLAP:
        out.options["moe_comm_overlap"] = False
        out.notes.append(
            f"no expert-parallel all-to-all overlap (moe_comm_overlap false: pp {pp}, vpp {vpp} "
            f"on {system}): no stored version of Megatron-Bridge's Qwen3 performance configs "
            "sets moe_a2a_overlap on GB200 / GB300, with or without a virtual pipeline "
            "(configs/qwen/qwen3_workload_base_configs.py QWEN3_235B_A22B_PRETRAIN_CONFIG_"
            "GB300_FP8_MX_V2 VP 12 and GB200_FP8_MX_V2 VP 3, NVIDIA-NeMo 01b2977e; the GB200 / "
            "GB300 configs of okoge-kaz 58f04619, ananthsub 2effdfa3 and configs/qwen3/"
            "workload_base_configs.py 0fa501ac), and utils/utils.py WorkloadBaseConfig "
            "defaults moe_a2a_overlap to False (the text names Megatron-Bridge)"
        )
        return
    out.options["moe_comm_overlap"] = vpp > 1
    out.notes.append(
        f"the expert-parallel all-to-all overlap {'on' if vpp > 1 else 'off'} (moe_comm_overlap "
        f"{str(vpp > 1).lower()}: pp {pp}, vpp {vpp}): every stored version of Megatron-Bridge's "
        "scripts/performance/configs/qwen/qwen3_workload_base_configs.py sets "
        "moe_a2a_overlap=True on the Qwen3 235B / 30B layouts with "
        "virtual_pipeline_model_parallel_size on H100, B200 and B300 and leaves it off on those "
        "without (GB200 PP 8, the later B200 / B300 PP 8) (okoge-kaz c3e43e6, ananthsub "
        "2effdfa3 / 4a645075, NVIDIA-NeMo 01b2977e); Megatron-Core's TransformerConfig asserts "
        "a virtual pipeline for overlap_moe_expert_parallel_comm when pipeline_model_parallel_"
        "size > 1 (the text names Megatron-Bridge)"
    )

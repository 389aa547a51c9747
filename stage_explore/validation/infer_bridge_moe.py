"""The selective recompute of Megatron-Bridge's MoE performance configs on Blackwell, for an
inferred row whose layout is a config's (6 Dec 2026, s19 mbrecipe).

Megatron-Bridge's ``scripts/performance/configs/<model>/*workload_base_configs.py`` set, per
model × GPU × precision, the layout and the ``recompute_modules`` the performance summary's runs
used. A row that names a Megatron-Bridge container, leaves its ``recompute`` cell empty and
states exactly a config's pipeline, virtual pipeline, expert-parallel and micro-batch sizes
takes that config's modules (:data:`BRIDGE_MOE_RECIPES`); a row whose layout is no stored
config's is left as it was (what it ran is not known). The same files set what the model has
no mechanism for — ``cuda_graph_scope`` — which the row's assumption names as not modelled
rather than faking it; their ``moe_flex_dispatcher_backend="hybridep"`` is read by
:mod:`~stage_explore.validation.infer_bridge_dispatch` (6 Dec 2026, s21 mbxrecipe) and their
``pp_layout`` (with the recipe's own layouts) by
:mod:`~stage_explore.validation.infer_bridge_layout` (6 Dec 2026, s22 pplayout)."""

from __future__ import annotations

from dataclasses import dataclass

from stage_explore.validation.infer_release import Defaults


@dataclass(frozen=True)
class MoeRecipe:
    """One Megatron-Bridge MoE performance config's recompute, keyed on what a row states.

    ``layout``: (pp, vpp, ep, micro_batch) as the config sets them; ``recipes``: the FP8
    recipes (``""`` for BF16) it is read for; ``first``: the first container (YY, MM)."""

    flavor: str
    systems: tuple[str, ...]
    first: tuple[int, int]
    recipes: tuple[str, ...]
    layout: tuple[int, int, int, int]
    modules: tuple[str, ...]
    why: str
    unmodelled: str


HYBRIDEP = (
    "moe_flex_dispatcher_backend 'hybridep' (HybridEP: timed as DeepEP's traffic at its own "
    "published rates, moe_hybridep, where the container is 26.01 or later, "
    "infer_bridge_dispatch.bridge_hybridep)"
)

#: (flavor, systems, first container, FP8 recipes, (pp, vpp, ep, mbs), modules, why, unmodelled).
BRIDGE_MOE_RECIPES: tuple[MoeRecipe, ...] = (
    MoeRecipe(
        "deepseek-v3", ("b200", "b300"), (25, 11), ("", "tensorwise", "mxfp8"), (16, 1, 8, 1),
        ("mla_up_proj",),
        "Megatron-Bridge scripts/performance/configs/deepseek/workload_base_configs.py "
        "(0fa501ac, the 25.11 era: DEEPSEEK_V3_B200_{BF16,FP8_CS,FP8_MX}_BASE_CONFIG) and every "
        "stored deepseek_workload_base_configs.py that sets PP 16 EP 8 (DEEPSEEK_V3_PRETRAIN_"
        "CONFIG_B200_V1 / _V2, B300_V1, their BF16 / FP8_CS / FP8_MX aliases; f0e2c37e): "
        "recompute_modules ['mla_up_proj']",
        HYBRIDEP + " in the 26.xx files; no CUDA graph",
    ),
    MoeRecipe(
        "deepseek-v3", ("gb200-nvl72",), (25, 11), ("",), (4, 4, 64, 1), ("mla_up_proj",),
        "Megatron-Bridge configs/deepseek/workload_base_configs.py (0fa501ac) "
        "DEEPSEEK_V3_GB200_BF16_BASE_CONFIG and deepseek_workload_base_configs.py "
        "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_BF16_V1 / _V2 (f0e2c37e): PP 4 VP 4 EP 64, "
        "recompute_modules ['mla_up_proj']",
        HYBRIDEP + " in the 26.xx files; TE CUDA graphs of attn / moe_router / moe_preprocess "
        "(not modelled)",
    ),
    MoeRecipe(
        "deepseek-v3", ("gb200-nvl72",), (26, 1), ("mxfp8",), (4, 4, 64, 1), ("mla_up_proj",),
        "Megatron-Bridge configs/deepseek/deepseek_workload_base_configs.py "
        "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1 / _V2 at PP 4 VP 4 EP 64 (f0e2c37e, an "
        "alias of GB200_V1; 04264182, its own): recompute_modules ['mla_up_proj']",
        HYBRIDEP + "; CUDA graphs (TE scopes or full_iteration, by version; not modelled)",
    ),
    MoeRecipe(
        "deepseek-v3", ("gb300-nvl72",), (26, 1), ("mxfp8",), (2, 8, 32, 2), ("mla_up_proj",),
        "Megatron-Bridge configs/deepseek/deepseek_workload_base_configs.py "
        "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1 (MBS 2, PP 2 VP 8, EP 32; FP8_MX_V1 / _V2 alias it "
        "at f0e2c37e; the later 04264182 FP8_MX_V1 runs MBS 1 without recompute): "
        "recompute_modules ['mla_up_proj']",
        HYBRIDEP + "; CUDA graphs off (cuda_graph_scope []); its pp_layout is read by "
        "infer_bridge_layout",
    ),
    MoeRecipe(
        "gpt-oss-120b", ("gb200-nvl72",), (26, 1), ("",), (1, 1, 64, 4), ("layernorm", "moe_act"),
        "Megatron-Bridge configs/gpt_oss/gpt_oss_workload_base_configs.py (07eea52d) "
        "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V1 / _V2 (EP 64, MBS 4): recompute_modules "
        "['layernorm', 'moe_act'] (the GB300 and B300 configs recompute nothing)",
        "V2's moe_a2a_overlap=True (not read: which version a container ran is not known)",
    ),
)  # fmt: skip


def _layout(stated: dict[str, int]) -> tuple[int, int, int, int]:
    """(pp, vpp, ep, micro_batch) a row states (1 where it states none), as
    :attr:`MoeRecipe.layout` keys them."""
    get = stated.get
    return get("pp", 1), get("vpp", 1), get("ep", 1), get("micro_batch", 1)


def bridge_moe_recompute(
    flavor: str,
    system: str,
    release: tuple[int, int],
    fp8_recipe: str,
    stated: dict[str, int],
    out: Defaults,
) -> bool:
    """Apply the first :data:`BRIDGE_MOE_RECIPES` entry matching the row (the caller checks
    that the text names Megatron-Bridge and the ``recompute`` cell is empty); whether one
    matched. ``fp8_recipe``: ``""`` for a BF16 row."""
    layout = _layout(stated)
    for r in BRIDGE_MOE_RECIPES:
        if (
            r.flavor == flavor
            and system in r.systems
            and release >= r.first
            and fp8_recipe in r.recipes
            and layout == r.layout
        ):
            out.parallel["recompute"] = "selective"
            out.parallel["recompute_modules"] = r.modules
            pp, vpp, ep, mbs = r.layout
            out.notes.append(
                f"selective recompute of {', '.join(r.modules)} (recompute_modules), the "
                f"Megatron-Bridge performance config of {flavor} on {system} at PP {pp} VP {vpp} "
                f"EP {ep} MBS {mbs}, the row's layout: {r.why}; also set there, not modelled: "
                f"{r.unmodelled} (the recompute column is empty; the text names Megatron-Bridge "
                f"container {release[0]}.{release[1]:02d})"
            )
            return True
    return False

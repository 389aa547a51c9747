"""The pipeline layout of Megatron-Bridge's DeepSeek-V3 recipe for an inferred row (6 Dec 2026,
s22 pplayout): which layers, MTP module, embedding and loss each virtual stage holds.

Megatron-Bridge never runs DeepSeek-V3's 61 layers on STAGE's default split. Its recipe sets
Megatron-Core's ``pipeline_model_parallel_layout`` from the pipeline and virtual pipeline sizes,
``set_deepseek_v3_pipeline_model_parallel_layout`` in
``src/megatron/bridge/recipes/deepseek/deepseek_v3.py`` (NVIDIA-NeMo/Megatron-Bridge 355cef45;
the same ``layout_map`` inline in ``_deepseek_v3_common`` of the ``enable_deepep`` era,
05d003fb), with ``last_layer = ['mtp'] * mtp_num_layers + ['loss']``:

- (PP 4, VP 1): the embedding and 16 layers, 16, 16, then 13 and ``last_layer``;
- (8, 1) and (4, 2): the embedding and 8, six stages of 8, then 5 and ``last_layer``;
- (16, 1), (8, 2) and (4, 4): the embedding and 4, fourteen stages of 4, then 1 and
  ``last_layer`` — Megatron's ``'Et*4|(t*4|)*14tmL'``.

The performance scripts apply it after setting the workload's sizes: B200 and B300 always
(``scripts/performance/configs/deepseek/deepseek_llm_pretrain.py``
``deepseek_v3_pretrain_config_b200`` / ``_b300``: "Recompute layout based on updated PP/VP
sizes", 69655bff), GB200 / GB300 / H100 unless the workload config sets ``pp_layout`` (there:
``if base_cfg.pp_layout: ... else: set_deepseek_v3_pipeline_model_parallel_layout``); the
25.09-era scripts pass ``layout=None`` to the recipe for B200 / GB200 (013284246), which then
takes the same map. The one Blackwell workload config with its own layout is GB300's PP 2 VP 8
(``DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1``: ``pp_layout="Et*4|(t*4|)*14tmL"``,
``scripts/performance/configs/deepseek/deepseek_workload_base_configs.py`` f0e2c37e). A row
whose (PP, VP) is neither is left on STAGE's split (what it ran is not known).

Where STAGE's default differed: 61 layers on 16 stages split as 3, 4 × 14, 2 (the lighter ends
carry the embedding and the head); the recipe's is 4, 4 × 14, 1, so the last stage holds one
layer, the MTP module and the loss, the first four layers and the embedding.
"""

from __future__ import annotations

from stage_explore.validation.infer_release import Defaults

_RECIPE = (
    "Megatron-Bridge recipes/deepseek/deepseek_v3.py set_deepseek_v3_pipeline_model_parallel_"
    "layout (355cef45; inline in _deepseek_v3_common at 05d003fb), which the performance "
    "scripts apply after setting the sizes (configs/deepseek/deepseek_llm_pretrain.py, 69655bff)"
)

#: The recipe's layout_map by (pp, vpp): the stages before the last (each closed by ``|``), and
#: the last stage's decoder layers before ``'m' * mtp + 'L'``.
RECIPE_LAYOUTS: dict[tuple[int, int], tuple[str, int]] = {
    (4, 1): ("Et*16|t*16|t*16|", 13),
    (8, 1): ("Et*8|(t*8|)*6", 5),
    (4, 2): ("Et*8|(t*8|)*6", 5),
    (16, 1): ("Et*4|(t*4|)*14", 1),
    (8, 2): ("Et*4|(t*4|)*14", 1),
    (4, 4): ("Et*4|(t*4|)*14", 1),
}

#: Layouts a workload config sets itself: (system, pp, vpp, mtp) -> (layout, why).
CONFIG_LAYOUTS: dict[tuple[str, int, int, int], tuple[str, str]] = {
    ("gb300-nvl72", 2, 8, 1): (
        "Et*4|(t*4|)*14tmL",
        "Megatron-Bridge configs/deepseek/deepseek_workload_base_configs.py "
        "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1 (PP 2 VP 8; f0e2c37e): pp_layout",
    ),
}


def recipe_layout(pp: int, vpp: int, mtp: int) -> str | None:
    """The layout string Megatron-Bridge's DeepSeek-V3 recipe sets for ``pp``·``vpp`` stages
    and ``mtp`` MTP layers, or None where its map has none."""
    entry = RECIPE_LAYOUTS.get((pp, vpp))
    if entry is None:
        return None
    head, last = entry
    layers = "t" if last == 1 else f"t*{last}"
    return f"{head}{layers}{'m' * mtp}L"


def bridge_deepseek_layout(
    flavor: str, system: str, mtp: int, stated: dict[str, int], out: Defaults
) -> bool:
    """Set ``pp_layout`` on a DeepSeek-V3 row that names Megatron-Bridge (the caller checks)
    from its workload config or the recipe's map; whether one applied. ``mtp``: the row's MTP
    layers (0 for a "w/o MTP" row)."""
    if flavor != "deepseek-v3" or stated.get("layers", 61) != 61:
        return False
    pp, vpp = stated.get("pp", 1), stated.get("vpp", 1)
    config = CONFIG_LAYOUTS.get((system, pp, vpp, mtp))
    layout, why = config if config else (recipe_layout(pp, vpp, mtp), _RECIPE)
    if layout is None or pp == 1:
        return False
    out.parallel["pp_layout"] = layout
    out.notes.append(
        f"pipeline layout {layout!r} (pp_layout: the embedding with the first stage's layers, "
        f"the last stage's layers, {mtp} MTP layer(s) and the loss together), Megatron-Bridge's "
        f"for DeepSeek-V3 at PP {pp} VP {vpp}: {why}"
    )
    return True

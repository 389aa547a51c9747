"""Megatron-Core's pipeline layout string (``--pipeline-model-parallel-layout``,
``pipeline_model_parallel_layout``): which layers each virtual pipeline stage holds, spelled out.

Contents:

- :func:`parse_layout`: the string as one tuple of layer tokens per global virtual stage, or a
  one-line :class:`ConfigError`.
- :func:`layout_problems`: the rules a parsed layout must satisfy for ``pp``·``vpp`` stages
  (model-independent).
- :func:`layout_layers`: the decoder layers of each stage (what :meth:`ParallelConfig.stage_layers`
  returns) and :func:`layout_mtp`: the multi-token-prediction layers it places.

The grammar is Megatron-Core's (``megatron/core/transformer/pipeline_parallel_layer_layout.py``,
class ``PipelineParallelLayerLayout``, ``parse_str_to_list`` and ``validate_layer_layout``;
NVIDIA/Megatron-LM 00caa53a): ``|`` separates the stages, listed in global order ``v·pp + r``
(chunk ``v`` of pipeline rank ``r``: Megatron reads entry ``vpp_rank·pp + pp_rank``); ``E`` is
the embedding, ``t`` a decoder ("transformer") layer, ``m`` a multi-token-prediction layer,
``L`` the loss (with the final norm and the output layer); ``x*n`` repeats one token and
``(...)*n`` a group, which may hold ``|``; commas are cosmetic. ``'Et*4|(t*4|)*14tmL'`` is 16
stages: the embedding and 4 layers, 14 stages of 4, then 1 layer, the MTP module and the loss.

Megatron's rules, which :func:`layout_problems` checks: ``E`` once and first, ``L`` once and
last, no decoder layer after an ``m``, the number of stages a multiple of ``pp`` (here: exactly
``pp·vpp``, the configuration's ``vpp``), and (:func:`layout_mtp` against the model) as many
``t`` as the model's layers and ``m`` as its MTP layers. STAGE places the embedding with the
first stage and the head, the MTP modules and the loss with the last (as the lowering always
has), so it also requires ``E`` in the first stage and ``L`` and every ``m`` in the last; a
layout Megatron accepts with an empty first or last stage, or with the MTP on the last chunk of
an earlier rank (its "standalone" MTP), is refused by name rather than placed elsewhere.
"""

from __future__ import annotations

import functools
import re

from stage_core.errors import ConfigError

#: Megatron-Core's layer characters (``char2layer_type``).
TOKENS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}

_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_SINGLE = re.compile(r"([^()|*\d])\*(\d+)")


def _expand(text: str) -> str:
    """``text`` with every ``(...)*n`` (innermost first) and ``x*n`` written out."""
    while True:
        expanded = _GROUP.sub(lambda m: m.group(1) * int(m.group(2)), text)
        if expanded == text:
            break
        text = expanded
    return _SINGLE.sub(lambda m: m.group(1) * int(m.group(2)), text)


@functools.lru_cache(maxsize=256)
def parse_layout(text: str) -> tuple[tuple[str, ...], ...]:
    """The layer tokens (``E``, ``t``, ``m``, ``L``) of each global virtual stage of a layout
    string; a one-line :class:`ConfigError` naming the bad character otherwise."""
    expanded = _expand(text.replace(",", "").replace(" ", ""))
    stages = tuple(tuple(stage) for stage in expanded.split("|"))
    for stage in stages:
        for char in stage:
            if char not in TOKENS:
                known = ", ".join(f"{c} ({name})" for c, name in TOKENS.items())
                raise ConfigError(
                    f"`pp_layout` takes the layer characters {known}, '|' between stages, "
                    f"'x*n' and '(...)*n', but got {char!r} in pp_layout={text!r}"
                )
    return stages


def layout_problems(text: str, pp: int, vpp: int) -> list[str]:
    """The model-independent rules ``text`` breaks for ``pp``·``vpp`` stages, one message each."""
    try:
        stages = parse_layout(text)
    except ConfigError as error:
        return [str(error)]
    given = f"pp_layout={text!r}"
    if len(stages) != pp * vpp:
        return [
            f"`pp_layout` must list pp·vpp = {pp * vpp} stages ({pp=}, {vpp=}), "
            f"but got {len(stages)} in {given}"
        ]
    flat = [token for stage in stages for token in stage]
    problems: list[str] = []
    if flat.count("E") != 1 or stages[0][:1] != ("E",):
        problems.append(f"`pp_layout` must open its first stage with the one 'E', but got {given}")
    if flat.count("L") != 1 or stages[-1][-1:] != ("L",):
        problems.append(f"`pp_layout` must end its last stage with the one 'L', but got {given}")
    if "m" in flat and "t" in flat[flat.index("m") :]:
        problems.append(
            f"`pp_layout` must place every 't' before the first 'm' (Megatron), but got {given}"
        )
    if any("m" in stage for stage in stages[:-1]):
        problems.append(
            "`pp_layout` must place the MTP layers ('m') in the last stage, with the loss (an "
            f"MTP on an earlier rank, Megatron's standalone MTP, is not modelled), but got {given}"
        )
    return problems


def layout_layers(text: str) -> tuple[int, ...]:
    """The decoder layers (``t``) of each global virtual stage of a layout string."""
    return tuple(stage.count("t") for stage in parse_layout(text))


def layout_mtp(text: str) -> int:
    """The multi-token-prediction layers (``m``) a layout string places."""
    return sum(stage.count("m") for stage in parse_layout(text))

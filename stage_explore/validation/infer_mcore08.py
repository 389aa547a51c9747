"""Megatron-Core rows the Megatron-LM README's "Training Speed and Scalability" section published
(Megatron-Core r0.8, 2024; the MCORE08 rows and its strong-scaling runs), read by an inferred
setup (:mod:`stage_explore.validation.infer_megatron`): the Transformer Engine userbuffers
defaults of the r0.8 era, and the interleaved schedule the README's strong-scaling sentence
requires. Each rule is keyed on what the row's text names (the README, the release), never on a
row id or a measured value; each is the reading the hand-written MCORE08 setup states.
"""

from __future__ import annotations

import re
from typing import Any

from stage_explore.validation.infer_release import Defaults, row_text
from stage_explore.validation.infer_stated import stated_or_inferred

#: A row that names Megatron-Core release r0.8 (``Megatron-Core r0.8.0``, ``megatron-core v0.8``).
MCORE_R08 = re.compile(r"megatron[\s-]*core\s+(?:r|v|core_r)?0\.8(?:\.\d+)?\b", re.IGNORECASE)
#: A row of the Megatron-LM README's weak- / strong-scaling runs.
README_SCALING = re.compile(r"megatron-lm\s+readme\b.*\bscaling\b", re.IGNORECASE)
#: The smallest number of virtual stages the README's strong-scaling sentence allows.
MIN_VPP = 4

R08_MARGINS = (
    "userbuffers overlaps without an SM margin (ub_bulk_sm_margin and ub_pipeline_sm_margin "
    "false; the text names Megatron-Core r0.8): Megatron-LM r0.8's --tp-comm-overlap without "
    "--tp-comm-overlap-cfg calls Transformer Engine's initialize_ub(ub_cfgs=None), and the TE "
    "of mid-2024 (transformer_engine/pytorch/module/base.py initialize_ub from "
    "NVIDIA/TransformerEngine#755, TE 1.6, April 2024, until the userbuffers refactor #1067, "
    "late 2024, which made the margin the default) builds every default overlap with "
    "add_ub(..., set_sm_margin=0), pipeline and bulk alike"
)


def r08_userbuffers(row: dict[str, str], out: Defaults) -> None:
    """A row naming Megatron-Core r0.8 (:data:`MCORE_R08`) and no NeMo container: TE's
    mid-2024 userbuffers defaults, without an SM margin (:data:`R08_MARGINS`)."""
    if not MCORE_R08.search(row_text(row)):
        return
    out.options.update(ub_bulk_sm_margin=False, ub_pipeline_sm_margin=False)
    out.notes.append(R08_MARGINS)


def smallest_vpp(layers_per_stage: int) -> int | None:
    """The smallest divisor >= :data:`MIN_VPP` of ``layers_per_stage`` (Megatron-LM's vpp is
    layers per stage over ``--num-layers-per-virtual-pipeline-stage``), else None."""
    return next(
        (v for v in range(MIN_VPP, layers_per_stage + 1) if layers_per_stage % v == 0), None
    )


def readme_interleaving(
    row: dict[str, str],
    stated: dict[str, int],
    parallel: dict[str, Any],
    layers: int,
    out: Defaults,
) -> None:
    """A README scaling row (:data:`README_SCALING`) with pp > 1 and the vpp column empty: the
    interleaved schedule with the fewest virtual stages >= 4 the layers per stage allow, when
    its micro-batches per replica are a multiple of pp (the schedule's requirement)."""
    pp = int(stated.get("pp", 1))
    if pp <= 1 or "vpp" in stated or not README_SCALING.search(row_text(row)) or layers % pp:
        return
    dp = stated_or_inferred(stated, parallel, "dp", default=0)
    micro = stated_or_inferred(stated, parallel, "micro_batch")
    batch = int(stated.get("global_batch_seqs", 0))
    if dp <= 0 or batch % (dp * micro) or (batch // (dp * micro)) % pp:
        return
    vpp = smallest_vpp(layers // pp)
    if vpp is None:
        return
    out.parallel["vpp"] = vpp
    out.notes.append(
        f"interleaved 1F1B, vpp {vpp} (the smallest divisor >= {MIN_VPP} of the "
        f"{layers // pp} layers per stage; the vpp column is empty): the Megatron-LM README's "
        "strong-scaling sentence (NVIDIA/Megatron-LM README.md at 0010ab74, 'Training Speed and "
        "Scalability': GPT-3 175B 'from 96 H100 GPUs to 4608 GPUs, using the same batch size "
        "of 1152 sequences throughout ... MFU from 47% to 42%') rules out the non-interleaved "
        "schedule for these runs (at tp 8 pp 6 and 12 micro-batches per replica it caps MFU at "
        "47 x 12/17 = 33 %) and needs vpp >= 4; Megatron-LM r0.8 sets vpp = (layers / pp) / "
        "--num-layers-per-virtual-pipeline-stage (megatron/training/arguments.py "
        f"validate_args), and the row's {batch // (dp * micro)} micro-batches per replica are "
        "a multiple of pp, as the interleaved schedule requires (megatron/core/pipeline_parallel/"
        "schedules.py forward_backward_pipelining_with_interleaving); the exact vpp is a rule, "
        "not stated (docs/analytical.md, s15 mcore08, s16 infer7)"
    )

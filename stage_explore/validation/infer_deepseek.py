"""DeepSeek's own training framework, as a row names it: the expert dispatch its report states.

DeepSeek trained DeepSeek-V3 in HAI-LLM, its own framework, which the project has no profile
of (the row runs the inferred ``megatron-core`` profile). What the report (DeepSeek-AI,
'DeepSeek-V3 Technical Report', arXiv 2412.19437; https://arxiv.org/abs/2412.19437) states of
its expert all-to-all is what DeepEP's normal kernels do, so a row that names HAI-LLM for a
model with node-limited (group-limited) routing takes the profile options that cost DeepEP's
traffic:

- Section 3.2.2: "we limit each token to be dispatched to at most 4 nodes, thereby reducing IB
  traffic. For each token, when its routing decision is made, it will first be transmitted via
  IB to the GPUs with the same in-node index on its target nodes. Once it reaches the target
  nodes, we will endeavor to ensure that it is instantaneously forwarded via NVLink to specific
  GPUs that host their target experts" -- a token once per destination node over InfiniBand and
  once per destination rank over NVLink: ``moe_deepep``'s traffic
  (:mod:`~stage_explore.analytical.deepep`; DeepEP's README: "To align with the group-limited
  gating algorithm proposed in the DeepSeek-V3 paper, DeepEP offers a set of kernels optimized
  for asymmetric-domain bandwidth forwarding, such as forwarding data from NVLink domain to RDMA
  domain", https://github.com/deepseek-ai/DeepEP),
  with "only 20 SMs" for it (DeepEP's SMs, :data:`~stage_explore.analytical.overlap.DEEPEP_SMS`);
- Section 3.3.4, 'Low-Precision Communication': the dispatch in FP8, the combine in BF16
  (``moe_fp8_dispatch``, :mod:`~stage_explore.analytical.profile_moe`), under an FP8 run.

A row naming HAI-LLM for a model without group-limited routing (no ``router_groups``: the
``deepseek-moe-16b`` flavor) is left alone: the report describing those kernels is DeepSeek-V3's,
whose routing they were built for.
"""

from __future__ import annotations

import re

from stage_core.models.spec import ModelSpec
from stage_explore.validation.infer_release import Defaults, row_text

#: DeepSeek's training framework, as a row names it (the DeepSeek-V3 report, Section 3.2: "The
#: training of DeepSeek-V3 is supported by the HAI-LLM framework, an efficient and lightweight
#: training framework crafted by our engineers from the ground up").
HAI_LLM = re.compile(r"\bhai[\s-]?llm\b", re.IGNORECASE)

DEEPEP_NOTE = (
    "the expert dispatch as DeepSeek's HAI-LLM runs it (moe_deepep: a token once per destination "
    "node over InfiniBand, then forwarded over NVLink, DeepEP's normal kernels, 20 SMs; "
    "DeepSeek-V3 report, arXiv 2412.19437, Section 3.2.2; the row names HAI-LLM and the model "
    "routes node-limited)"
)
FP8_DISPATCH_NOTE = (
    "the dispatch in FP8 with 1x128 fp32 scales, the combine in BF16 (moe_fp8_dispatch; "
    "DeepSeek-V3 report, Section 3.3.4 'Low-Precision Communication')"
)


def hai_llm_dispatch(row: dict[str, str], spec: ModelSpec, precision: str, out: Defaults) -> None:
    """Set ``out``'s DeepEP options where ``row`` names HAI-LLM and ``spec`` routes
    node-limited (module docstring); nothing where the row sets a dispatcher itself."""
    if {"moe_deepep", "moe_hybridep"} & set(out.options):
        return
    if not spec.is_moe or spec.router_group_topk == 0 or not HAI_LLM.search(row_text(row)):
        return
    out.options["moe_deepep"] = True
    out.notes.append(DEEPEP_NOTE)
    if precision == "fp8":
        out.options["moe_fp8_dispatch"] = True
        out.notes.append(FP8_DISPATCH_NOTE)

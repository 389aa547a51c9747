"""Evaluating published cases: :func:`evaluate_cases`, :func:`predict` (the compared metric
from an :class:`~stage_explore.evaluation.Evaluation`, counted as the source counts it),
:class:`RowResult`, and :func:`leave_one_source_out`.

A backend factory maps a framework name (``setups.toml``) to a backend; the default builds an
:class:`~stage_explore.analytical.backend.AnalyticalBackend` with that framework profile and the
given network efficiencies. Efficiency constants of a system come from
:mod:`stage_explore.calibrate` (``apply``) when a fit is asked for.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models.spec import Activation, ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import DEFAULT_NETWORK_EFFICIENCY, AnalyticalBackend
from stage_explore.analytical.memory_kinds import RANK0_PREFIX
from stage_explore.evaluation import BaseBackend, Evaluation
from stage_explore.system.model import System
from stage_explore.validation.setup_systems import case_system
from stage_explore.validation.setups import Case, parse_backend_key

BackendFactory = Callable[[str], BaseBackend]


def supports_framework() -> bool:
    """Whether :class:`AnalyticalBackend` takes a ``framework`` profile name."""
    return "framework" in inspect.signature(AnalyticalBackend.__init__).parameters


def analytical_factory(
    network_efficiency: Sequence[float] = DEFAULT_NETWORK_EFFICIENCY,
) -> BackendFactory:
    """Framework name → a memoised analytical backend with that profile (when the backend
    has profiles; otherwise the framework is only recorded) and ``network_efficiency``."""
    backends: dict[str, BaseBackend] = {}
    with_framework = supports_framework()

    def make(framework: str) -> BaseBackend:
        key = framework if with_framework else ""
        if key not in backends:
            options: dict[str, Any] = {"network_efficiency": tuple(network_efficiency)}
            if with_framework:  # a Case.backend_key: the profile and the row's options
                options["framework"], overrides = parse_backend_key(framework)
                if overrides:
                    options["overrides"] = overrides
            backends[key] = AnalyticalBackend(**options)
        return backends[key]

    return make


def megatron_flops(model: ModelSpec, global_batch: int, recompute: bool) -> float:
    """FLOPs per iteration as Megatron-Core and NeMo count a dense decoder's model FLOPs.

    Per token and layer (forward + backward, 3 x 2 FLOPs per multiply-add): the attention
    projections 12·h·d·(a + g) (queries and output over ``a`` heads, keys and values over ``g``
    groups, head dim ``d``), the attention core 12·s·a·d with no causal halving, the MLP
    18·h·f gated (SwiGLU: three matrices) or 12·h·f otherwise; per token 6·h·V for the logits.
    This is NeMo 2.0's ``flops_formulas.llama3`` / ``llama2`` (``12 + 12·g/a + 18·f/h +
    12·s/h + 6·V/(l·h)`` times ``B·s·l·h²``; NVIDIA/NeMo ``nemo/utils/flops_formulas.py``,
    the versions without ``causal_self_attn``) and Megatron-LM's
    ``num_floating_point_operations`` (GQA, ``gated_linear_multiplier``); for GPT blocks (ffn =
    4h, gelu, as many kv as query heads) it is Narayanan et al. 2021's eq. 3 without recompute,
    ``72·B·s·l·h²·(1 + s/6h + V/12lh)``. With full recompute the layers' forward counts twice
    (eq. 3's 96 = 4/3 · 72); the logits are not recomputed. MoE, MLA and hybrid models are
    counted with their dense ``ffn`` and ``heads`` (no source of this kind compares TFLOP/s).
    The vocabulary is the source's (unpadded)."""
    b, s, layers, h, v = global_batch, model.seq_len, model.layers, model.hidden, model.vocab
    heads = model.heads
    groups = model.kv_heads or heads
    head_dim = model.head_dim or h // heads
    mlp = (18 if model.activation == Activation.SWIGLU else 12) * h * model.ffn
    per_layer: float = 12 * h * head_dim * (heads + groups) + 12 * s * heads * head_dim + mlp
    if recompute:
        per_layer = per_layer * 4 / 3
    return b * s * (layers * per_layer + 6 * h * v)


def predict(case: Case, result: Evaluation) -> float:
    """The compared metric of ``case`` from the backend's ``result``, counted as the source
    counts it (NaN when the backend gave no time)."""
    assert case.model is not None and case.parallel is not None
    parallel, gpus = case.parallel, result.num_gpus
    if case.metric == "iter_time_s":
        return result.step_time_s
    if case.metric == "peak_mem_gib":  # the kind the row measures, of pipeline rank 0 when the
        # row names rank 0's figure; a backend reporting one peak only (astra-sim's: the
        # tensors') is compared with that
        key = f"peak_{case.memory_kind}_bytes"
        kind_bytes = result.extra.get(key, result.peak_memory_bytes)
        if case.memory_rank0:
            kind_bytes = result.extra.get(RANK0_PREFIX + key, kind_bytes)
        return float(kind_bytes) / 2**30
    if case.metric == "tokens_per_s_per_gpu":
        tokens = parallel.global_batch * case.model.seq_len
        return tokens / (result.step_time_s * gpus)
    flops = megatron_flops(case.model, parallel.global_batch, case.flops == "megatron-recompute")
    return flops / (result.step_time_s * gpus) / 1e12


@dataclass(frozen=True, slots=True)
class RowResult:
    """One published row: predicted vs measured, or why it was not evaluated."""

    case: Case
    predicted: float
    feasible: bool = True
    note: str = ""

    @property
    def evaluated(self) -> bool:
        return math.isfinite(self.predicted)

    @property
    def error(self) -> float:
        """``(predicted − measured) / measured``; NaN when not evaluated."""
        if not self.evaluated:
            return float("nan")
        return (self.predicted - self.case.measured) / self.case.measured

    def to_dict(self) -> dict[str, Any]:
        case = self.case
        return {
            "id": case.id,
            "source": case.source,
            "metric": case.metric,
            "predicted": self.predicted if self.evaluated else None,
            "measured": case.measured,
            "error": self.error if self.evaluated else None,
            "in_sample": case.in_sample,
            "in_sample_why": case.in_sample_why,
            "evaluated": self.evaluated,
            "not_evaluated_reason": "" if self.evaluated else self.note,
            "feasible": self.feasible,
            "note": self.note if self.evaluated else "",
            "system": case.system,
            "framework": case.framework,
            "setup": describe(case.parallel) if case.parallel is not None else "",
            "group": case.group,
            "assumptions": list(case.assumptions),
        }


def describe(parallel: ParallelConfig) -> str:
    """``tp8 pp8 dp1 mb1 vpp3 sp zero1 selective recompute fp16``."""
    parts = [f"tp{parallel.tp} pp{parallel.pp} dp{parallel.dp}", f"mb{parallel.micro_batch}"]
    for name, value in (("cp", parallel.cp), ("ep", parallel.ep), ("vpp", parallel.vpp)):
        if value > 1:
            parts.append(f"{name}{value}")
    if parallel.ep > 1 and parallel.expert_tp != parallel.tp:
        parts.append(f"etp{parallel.expert_tp}")
    if parallel.sp:
        parts.append("sp")
    if parallel.zero:
        parts.append(f"zero{parallel.zero}")
    if parallel.dp_shard is not None:  # hybrid sharding: ZeRO inside shard groups of dp_shard
        parts.append(f"hsdp{parallel.dp_shard}")
    recompute = str(parallel.recompute)
    if parallel.recompute_num_layers is not None:  # partial: ``full(2 block)``
        recompute += f"({parallel.recompute_num_layers} {parallel.recompute_method})"
    parts.append(f"{recompute} recompute {parallel.precision}")
    return " ".join(parts)


def evaluate_case(case: Case, backend: BaseBackend, system: System) -> RowResult:
    """One case on ``backend``; a point the backend refuses becomes a not-evaluated row."""
    if case.model is None or case.parallel is None or not math.isfinite(case.measured):
        return RowResult(case, float("nan"), note=case.reason)
    try:
        result = backend.evaluate(case.model, case.parallel, system)
    except ConfigError as error:
        return RowResult(case, float("nan"), note=f"the backend refuses it: {error}")
    if not math.isfinite(result.step_time_s):
        return RowResult(case, float("nan"), False, f"no prediction: {result.reason}")
    note = "" if result.feasible else f"predicted infeasible: {result.reason}"
    return RowResult(case, predict(case, result), result.feasible, note)


def evaluate_cases(
    cases: Sequence[Case],
    factory: BackendFactory | None = None,
    systems: Mapping[str, System] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[RowResult]:
    """Every case, on its system (``systems[name]``, else loaded with the case's overrides:
    :func:`~stage_explore.validation.setup_systems.case_system`) and framework; ``progress(done,
    total)`` after each (s29 review: ``stage validate`` ran 20-50 s with nothing on screen)."""
    factory = factory or analytical_factory()
    loaded: dict[str, System] = dict(systems or {})
    results = []
    for case in cases:
        if case.model is None or case.parallel is None:  # its reason: no system needed
            results.append(RowResult(case, float("nan"), note=case.reason))
        else:
            if case.system not in loaded:
                loaded[case.system] = case_system(case)
            results.append(evaluate_case(case, factory(case.backend_key), loaded[case.system]))
        if progress is not None:
            progress(len(results), len(cases))
    return results

"""Serving validation: the analytical serving model against published serving measurements.

Reads ``stage_explore/data/serving_runs.csv`` (each row: source, URL and commit, model and its
flavor, precision, GPU and system preset, tp/pp/ep, input and output lengths, the measured
metric, what the source leaves uncertain). Every row is held out: no constant of the serving
model was chosen by looking at one (the kernel and link constants come from the system presets,
cited there).

A row of ``output_tokens_per_s`` is a maximum-load throughput benchmark (every request queued at
once, uniform lengths): the model serves the largest batch whose average sequence
(``isl + osl/2`` tokens) fits in ``memory_utilization`` of the GPU, co-located prefill and
decode (:func:`~stage_explore.analytical.serving.evaluate_serve`), and reports output tokens/s.
A row's optional ``max_batch`` cell is the engine's cap on concurrent sequences (e.g.
trtllm-bench's 4,096, ``tensorrt_llm/bench/build/tuning.py`` ``finetune_setting``): the batch
served is the smaller of the cap and the largest batch that fits; an empty or missing cell is no
cap. A row's optional ``kv_free_fraction`` cell (a number in (0, 1)) says the row ran on
TensorRT-LLM (trtllm-bench), which sizes the KV cache its own way
(:mod:`~stage_explore.validation.serving_trtllm`): that fraction of the memory left after the
weights and the engine's activation memory, every sequence holding its blocks to completion
(``isl + osl`` tokens); an empty or missing cell keeps vLLM's rule above. Such a row's prompts
are also packed into the engine's ``max_num_tokens`` per step (trtllm-bench build's heuristic,
:func:`~stage_explore.validation.serving_trtllm.engine_max_num_tokens`), not the 8,192 default:
TensorRT-LLM's in-flight batching scheduler fills one step with the running requests' decode
tokens and then context tokens while the step holds at most ``max_num_tokens``
(``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp`` at 0a949d31,
``MicroBatchScheduler::operator()``: ``batchNumTokens + reqNumTokens > maxNumTokensRuntime``
stops the step; nvidia.github.io/TensorRT-LLM, "Tuning Max Batch Size and Max Num Tokens").
A row whose ``engine`` cell is ``vllm-v1`` is an offline vLLM V1 benchmark of ``num_prompts``
requests queued at once: its throughput is a replay of V1's scheduler over the whole run
(:mod:`~stage_explore.validation.serving_vllm`: chunked prefill within ``max_num_batched_tokens``,
KV blocks, preemption of the newest request and its recompute), at most ``max_batch``
(``max_num_seqs``) running.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError, StageError
from stage_core.models import get_flavor
from stage_core.serving import Phase, ServingConfig, max_batch
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.serving import (
    DEFAULT_MEMORY_UTILIZATION,
    DEFAULT_PREFILL_TOKENS_PER_STEP,
    RequestMix,
    evaluate_serve,
)
from stage_explore.system import load_system
from stage_explore.validation.serving_trtllm import (
    engine_max_num_tokens,
    kv_free_fraction,
    trtllm_batch,
)
from stage_explore.validation.serving_vllm import engine_cell, vllm_offline_tokens_per_s

#: Where the shipped measurements live.
SERVING_RUNS = Path(__file__).resolve().parents[1] / "data" / "serving_runs.csv"
METRICS = ("output_tokens_per_s",)


@dataclass(frozen=True, slots=True)
class ServingRow:
    """One published serving measurement and the model's prediction (NaN: not evaluated)."""

    id: str
    source: str
    metric: str
    measured: float
    predicted: float
    setup: str
    note: str = ""

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured

    def to_dict(self) -> dict[str, Any]:
        evaluated = math.isfinite(self.predicted)
        return {
            "id": self.id, "source": self.source, "metric": self.metric,
            "predicted": self.predicted if evaluated else None, "measured": self.measured,
            "error": self.error if evaluated else None, "in_sample": False,
            "setup": self.setup, "note": self.note,
        }  # fmt: skip


def _int(row: dict[str, str], key: str, line: int) -> int:
    try:
        return int(row[key])
    except (KeyError, ValueError):
        raise ConfigError(
            f"serving_runs.csv line {line}: `{key}` must be an int, got {row.get(key)!r}"
        ) from None


def _cap(row: dict[str, str], line: int) -> int | None:
    """The row's ``max_batch`` cell: a positive int, or None when the cell is empty or absent."""
    cell = (row.get("max_batch") or "").strip()
    if not cell:
        return None
    cap = _int(row, "max_batch", line)
    if cap < 1:
        raise ConfigError(
            f"serving_runs.csv line {line}: `max_batch` must be a positive int, got {cell!r}"
        )
    return cap


def _positive(row: dict[str, str], key: str, line: int) -> int | None:
    """An optional positive-int cell: None when empty or absent."""
    cell = (row.get(key) or "").strip()
    if not cell:
        return None
    value = _int(row, key, line)
    if value < 1:
        raise ConfigError(
            f"serving_runs.csv line {line}: `{key}` must be a positive int, got {cell!r}"
        )
    return value


def _prompts(row: dict[str, str], line: int, engine: str, fraction: float | None) -> int | None:
    """The row's ``num_prompts`` cell for a ``vllm-v1`` row (required there, a positive int);
    None for other engines (where the cell must be empty)."""
    cell = (row.get("num_prompts") or "").strip()
    if engine != "vllm-v1":
        if cell:
            raise ConfigError(
                f"serving_runs.csv line {line}: `num_prompts` is read only for engine 'vllm-v1', "
                f"got {cell!r} with engine {engine!r}"
            )
        return None
    if fraction is not None:
        raise ConfigError(
            f"serving_runs.csv line {line}: `kv_free_fraction` is TensorRT-LLM's rule, got "
            f"{fraction!r} with engine 'vllm-v1'"
        )
    value = _int(row, "num_prompts", line)
    if value < 1:
        raise ConfigError(
            f"serving_runs.csv line {line}: `num_prompts` must be a positive int, got {cell!r}"
        )
    return value


def evaluate_row(row: dict[str, str], line: int, backend: AnalyticalBackend) -> ServingRow:
    """Predict one row (see the module docstring)."""
    if row["metric"] not in METRICS:
        raise ConfigError(
            f"serving_runs.csv line {line}: metric {row['metric']!r} is not one of {METRICS}"
        )
    isl, osl = _int(row, "isl", line), _int(row, "osl", line)
    tp, pp, ep = _int(row, "tp", line), _int(row, "pp", line), _int(row, "ep", line)
    setup = f"tp{tp} pp{pp} ep{ep} {row['precision']} isl {isl} osl {osl} on {row['system']}"
    measured = float(row["measured"])
    cap = _cap(row, line)
    fraction = kv_free_fraction(row.get("kv_free_fraction"), line)
    engine = engine_cell(row.get("engine"), line)
    prompts = _prompts(row, line, engine, fraction)
    try:
        model = get_flavor(row["flavor"])
        system = load_system(row["system"])
        base = ServingConfig(
            phase=Phase.DECODE, batch=1, tp=tp, pp=pp, ep=ep, precision=row["precision"],
            kv_precision=row["kv_precision"], context_len=isl + osl // 2,
        )  # fmt: skip
        memory = system.accelerator.memory_bytes
        if prompts is not None:  # vLLM V1's offline wave, replayed (serving_vllm)
            usable = int(memory * DEFAULT_MEMORY_UTILIZATION)
            rate, note = vllm_offline_tokens_per_s(
                backend, model, base, system, isl=isl, osl=osl, num_prompts=prompts,
                max_num_seqs=cap, usable_bytes=usable,
                max_num_batched_tokens=_positive(row, "max_num_batched_tokens", line),
            )  # fmt: skip
            return ServingRow(row["id"], row["source"], row["metric"], measured, rate,
                              f"{setup}, {note}")  # fmt: skip
        budget = DEFAULT_PREFILL_TOKENS_PER_STEP
        if fraction is None:  # vLLM: gpu_memory_utilization of the total
            fits = max_batch(model, base, int(memory * DEFAULT_MEMORY_UTILIZATION))
        else:  # TensorRT-LLM: of the memory free after loading, blocks held to completion
            tokens = engine_max_num_tokens(model, base, memory, isl, osl)
            budget = tokens  # the engine's step budget, also its prefill packing (docstring)
            fits = trtllm_batch(model, replace(base, context_len=isl + osl), memory, fraction,
                                tokens)  # fmt: skip
        batch = fits if cap is None else min(fits, cap)
        if batch == 0:
            return ServingRow(row["id"], row["source"], row["metric"], measured, math.nan,
                              setup, "the model does not fit")  # fmt: skip
        result = evaluate_serve(
            backend, model, replace(base, batch=batch), system,
            RequestMix(prompt_len=isl, output_len=osl), prefill_tokens_per_step=budget,
        )  # fmt: skip
    except StageError as error:
        return ServingRow(row["id"], row["source"], row["metric"], measured, math.nan, setup,
                          f"not evaluated: {error}")  # fmt: skip
    capped = "" if cap is None or fits <= cap else f" (the engine's cap; {fits} would fit)"
    step = "" if fraction is None else f", {budget} tokens per step"
    return ServingRow(
        row["id"], row["source"], row["metric"], measured, result.tokens_per_s,
        f"{setup}{step}, batch {batch}{capped}",
    )  # fmt: skip


def validate_serving(path: Path | None = None) -> list[ServingRow]:
    """Every row of the serving measurements, predicted."""
    source = path or SERVING_RUNS
    try:
        with source.open(newline="") as file:
            rows = list(csv.DictReader(file))
    except OSError as error:
        raise ConfigError(f"cannot read serving measurements {source}: {error}") from None
    backend = AnalyticalBackend()
    return [evaluate_row(row, line, backend) for line, row in enumerate(rows, start=2)]


def serving_summary(rows: list[ServingRow]) -> dict[str, Any]:
    """Per source: rows, held-out mean absolute error and the largest error."""
    result: dict[str, Any] = {}
    for source in sorted({r.source for r in rows}):
        mine = [r for r in rows if r.source == source]
        errors = [abs(r.error) for r in mine if math.isfinite(r.predicted)]
        result[source] = {
            "in_sample_mae": None,
            "held_out_mae": sum(errors) / len(errors) if errors else None,
            "max_abs_error": max(errors) if errors else None,
            "evaluated": len(errors),
            "rows": [r.to_dict() for r in mine],
        }
    return result


def serving_rows(folder: Path | None) -> list[ServingRow]:
    """The serving measurements of ``folder`` (default: the package's data); none when the
    folder has no ``serving_runs.csv``."""
    path = SERVING_RUNS if folder is None else Path(folder) / SERVING_RUNS.name
    return validate_serving(path) if path.is_file() else []


def _pct(value: float) -> str:
    return f"{value * 100:+.1f} %"


def serving_text(rows: list[ServingRow]) -> str:
    """The serving section of ``stage validate``'s text output."""
    if not rows:
        return ""
    lines = ["", "Serving (held out: no constant was chosen on these rows)"]
    for source, summary in serving_summary(rows).items():
        mae = summary["held_out_mae"]
        shown = "—" if mae is None else f"{mae * 100:.2f} %"
        lines.append(f"  {source}: {summary['evaluated']} rows, held-out MAE {shown}")
    for row in rows:
        error = _pct(row.error) if math.isfinite(row.predicted) else row.note
        lines.append(f"    {row.id:30s} {row.predicted:>10,.0f} vs {row.measured:>10,.0f}  {error}")
    return "\n".join(lines)


def serving_markdown(rows: list[ServingRow]) -> str:
    """The serving section of ``stage validate --markdown``."""
    if not rows:
        return ""
    lines = [
        "",
        "## Serving (held out)",
        "",
        "Published serving measurements (`stage_explore/data/serving_runs.csv`, sources and "
        "uncertain fields there) against the analytical serving model (`docs/serving.md`): "
        "output tokens/s at maximum load, the largest batch that fits, co-located prefill and "
        "decode. No constant was chosen on these rows.",
        "",
        "| source | rows evaluated | held-out MAE | largest error |",
        "|---|---:|---:|---:|",
    ]
    for source, summary in serving_summary(rows).items():
        mae, worst = summary["held_out_mae"], summary["max_abs_error"]
        lines.append(
            f"| {source} | {summary['evaluated']} of {len(summary['rows'])} | "
            f"{'—' if mae is None else f'{mae * 100:.2f} %'} | "
            f"{'—' if worst is None else f'{worst * 100:.1f} %'} |"
        )
    lines += ["", "| id | predicted | measured | error | setup |", "|---|---:|---:|---:|---|"]
    for row in rows:
        error = _pct(row.error) if math.isfinite(row.predicted) else row.note
        lines.append(
            f"| {row.id} | {row.predicted:,.0f} | {row.measured:,.0f} | {error} | {row.setup} |"
        )
    return "\n".join(lines) + "\n"

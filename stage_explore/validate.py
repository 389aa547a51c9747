"""Validation of the analytical backend against published training runs (``stage validate``).

Reads ``published_runs.csv`` (default: the copy shipped in ``stage_explore/data``, see
:func:`default_csv_path`) and evaluates every row on the ``a100-80gb`` preset
(DGX A100 80 GB, as on Selene):

- **KOR22-T5** (Korthikanti et al. 2022, Table 5): iteration time in seconds; tp, pp, dp,
  micro-batch, sp, recompute and interleaving (``vpp``) from the CSV.
- **NAR21-T1** (Narayanan et al. 2021, Table 1): TFLOP/s per GPU as the paper counts them,
  ``96·B·s·l·h²·(1 + s/6h + V/16lh)`` FLOPs per iteration (full recompute included) over
  (iteration time × GPUs). The table omits the micro-batch size, the interleaving and the
  data-parallel implementation; they are taken from the paper's artifact, Megatron-LM's
  ``examples/sc21/run_table_1.sh`` (:data:`NARAYANAN_SETUPS`). Megatron-LM of 2021
  reduced fp16 gradients (``--accumulate-allreduce-grads-in-fp32`` off by default): "torch"
  DDP overlaps the reduction with the backward in 25 MiB buckets, "local" DDP reduces once
  after the backward (one bucket per model chunk here).
- **KOR22-F1** (Korthikanti et al. 2022, Figure 1): peak memory per GPU in GiB.

Every row runs in fp16 with Megatron's defaults otherwise (vocabulary padded to 128·tp,
dropout, tied embeddings). The error is ``(predicted − measured) / measured``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models import get_flavor, list_flavors
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig, Precision, Recompute, Schedule
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.evaluation import BaseBackend
from stage_explore.system import load_system

#: Narayanan et al. 2021, Table 1 rows by (layers, hidden): micro-batch, layers per virtual
#: pipeline stage (0: no interleaving) and DDP implementation, from Megatron-LM's
#: ``examples/sc21/run_table_1.sh`` (the paper's reproduction scripts).
NARAYANAN_SETUPS: dict[tuple[int, int], tuple[int, int, str]] = {
    (24, 2304): (16, 0, "torch"),
    (30, 3072): (16, 0, "torch"),
    (36, 4096): (16, 0, "torch"),
    (40, 6144): (8, 0, "torch"),
    (48, 8192): (4, 0, "local"),
    (60, 10240): (2, 5, "local"),
    (80, 12288): (2, 5, "local"),
    (96, 16384): (1, 3, "local"),
    (105, 20480): (1, 1, "local"),
    (128, 25600): (1, 0, "local"),
}

#: "local" DDP: one gradient bucket per model chunk, reduced after its backward.
ONE_BUCKET_BYTES = 1 << 62

BLOCKS = ("KOR22-T5", "NAR21-T1", "KOR22-F1")
METRICS = {"KOR22-T5": "iter_time_s", "NAR21-T1": "tflops_per_gpu", "KOR22-F1": "peak_mem_gib"}
SYSTEM = "a100-80gb"


def default_csv_path() -> Path:
    """``published_runs.csv`` shipped with the package (``stage_explore/data``, sources in its
    README), so an installed ``stage validate`` finds it."""
    return Path(__file__).resolve().parent / "data" / "published_runs.csv"


@dataclass(frozen=True, slots=True)
class Check:
    """One row: what was compared, predicted and measured, the signed relative error."""

    id: str
    block: str
    metric: str
    predicted: float
    measured: float
    setup: str

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "block": self.block,
            "metric": self.metric,
            "predicted": self.predicted,
            "measured": self.measured,
            "error": self.error,
            "setup": self.setup,
        }


@dataclass(frozen=True, slots=True)
class ValidationReport:
    checks: tuple[Check, ...]
    source: str

    def mean_abs_error(self) -> dict[str, float]:
        """Mean |error| per block (blocks with rows only)."""
        result = {}
        for block in BLOCKS:
            errors = [abs(c.error) for c in self.checks if c.block == block]
            if errors:
                result[block] = sum(errors) / len(errors)
        return result

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "rows": [c.to_dict() for c in self.checks],
            "mean_abs_error": self.mean_abs_error(),
        }

    def to_text(self) -> str:
        header = f"{'id':<22} {'metric':<15} {'predicted':>10} {'measured':>10} {'error':>8}  setup"
        lines = [header, "-" * len(header)]
        for block in BLOCKS:
            for c in (c for c in self.checks if c.block == block):
                lines.append(
                    f"{c.id:<22} {c.metric:<15} {c.predicted:>10.3f} {c.measured:>10.3f} "
                    f"{c.error * 100:>+7.1f}%  {c.setup}"
                )
        lines.append("")
        for block, mae in self.mean_abs_error().items():
            lines.append(f"mean |error| {block}: {mae * 100:.2f} %")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        lines = [
            "| id | metric | predicted | measured | error | setup |",
            "|---|---|---:|---:|---:|---|",
        ]
        for block in BLOCKS:
            for c in (c for c in self.checks if c.block == block):
                lines.append(
                    f"| {c.id} | {c.metric} | {c.predicted:.3f} | {c.measured:.3f} | "
                    f"{c.error * 100:+.1f} % | {c.setup} |"
                )
        lines += ["", "| block | rows | mean absolute error |", "|---|---:|---:|"]
        for block, mae in self.mean_abs_error().items():
            rows = sum(c.block == block for c in self.checks)
            lines.append(f"| {block} | {rows} | {mae * 100:.2f} % |")
        return "\n".join(lines)


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """The CSV's rows; a missing or unreadable file is a one-line :class:`ConfigError`."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    except OSError as error:
        raise ConfigError(f"cannot read published runs {str(path)!r}: {error.strerror}") from None


def block_of(row_id: str) -> str:
    """``KOR22-T5-22B-full`` → ``KOR22-T5``."""
    return "-".join(row_id.split("-")[:2])


def _model(row: dict[str, str]) -> ModelSpec:
    dims = tuple(int(row[k]) for k in ("layers", "hidden", "ffn", "heads", "vocab", "seq_len"))
    for name in list_flavors():
        if name.startswith("megatron-gpt-"):
            flavor = get_flavor(name)
            if (
                flavor.layers,
                flavor.hidden,
                flavor.ffn,
                flavor.heads,
                flavor.vocab,
                flavor.seq_len,
            ) == dims:
                return flavor
    raise ConfigError(
        f"row {row['id']}: no megatron-gpt flavor has the dims {dims} of {row['model']!r}"
    )


def _int(row: dict[str, str], name: str, default: int | None = None) -> int:
    value = row.get(name, "").strip()
    if not value:
        if default is None:
            raise ConfigError(f"row {row['id']}: column `{name}` is empty")
        return default
    return int(value)


def setup(row: dict[str, str]) -> tuple[ModelSpec, ParallelConfig]:
    """The model and parallel config a row ran with (see the module docstring)."""
    model = _model(row)
    block = block_of(row["id"])
    tp, pp, dp = _int(row, "tp"), _int(row, "pp"), _int(row, "dp")
    recompute = Recompute(row["recompute"].split()[0] if row["recompute"].strip() else "none")
    options: dict[str, Any] = {}
    if block == "NAR21-T1":
        micro_batch, per_virtual, ddp = NARAYANAN_SETUPS[(model.layers, model.hidden)]
        vpp = model.layers // (pp * per_virtual) if per_virtual else 1
        options["grad_fp32"] = False
        if ddp == "local":
            options["grad_bucket_bytes"] = ONE_BUCKET_BYTES
    else:
        micro_batch, vpp = _int(row, "micro_batch"), _int(row, "vpp", 1)
    return model, ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=micro_batch,
        global_batch=_int(row, "global_batch_seqs"),
        sp=row["sp"].strip() == "yes",
        recompute=recompute,
        vpp=vpp,
        schedule=Schedule.INTERLEAVED if vpp > 1 else Schedule.ONE_F_ONE_B,
        precision=Precision.FP16,
        **options,
    )


def megatron_flops(model: ModelSpec, global_batch: int) -> float:
    """FLOPs per iteration with full recompute as Narayanan et al. count them (their eq. 3):
    ``96·B·s·l·h²·(1 + s/6h + V/16lh)``."""
    b, s, layers, h, v = global_batch, model.seq_len, model.layers, model.hidden, model.vocab
    return 96 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))


def _describe(parallel: ParallelConfig) -> str:
    parts = [f"tp{parallel.tp} pp{parallel.pp} dp{parallel.dp}", f"mb{parallel.micro_batch}"]
    if parallel.vpp > 1:
        parts.append(f"vpp{parallel.vpp}")
    if parallel.sp:
        parts.append("sp")
    parts.append(f"{parallel.recompute} recompute")
    return " ".join(parts)


def run_validation(
    path: str | Path | None = None,
    backend: BaseBackend | None = None,
    system: str = SYSTEM,
) -> ValidationReport:
    """Evaluate every row of the CSV at ``path`` (default :func:`default_csv_path`)."""
    source = Path(path) if path is not None else default_csv_path()
    rows = read_rows(source)
    machine = load_system(system)
    backend = backend or AnalyticalBackend()
    checks = []
    for row in rows:
        block = block_of(row["id"])
        if block not in METRICS:
            continue
        model, parallel = setup(row)
        result = backend.evaluate(model, parallel, machine)
        metric = METRICS[block]
        if block == "KOR22-T5":
            predicted = result.step_time_s
        elif block == "NAR21-T1":
            predicted = (
                megatron_flops(model, parallel.global_batch)
                / (result.step_time_s * result.num_gpus)
                / 1e12
            )
        else:
            predicted = result.peak_memory_bytes / 2**30
        measured = float(row[metric])
        if not math.isfinite(predicted):
            raise ConfigError(f"row {row['id']}: the backend gave no prediction ({result.reason})")
        checks.append(Check(row["id"], block, metric, predicted, measured, _describe(parallel)))
    return ValidationReport(tuple(checks), str(source))

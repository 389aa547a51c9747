"""Do equivalent spellings of a row give the same prediction? Every row of the package CSVs
(``stage_explore/data/published_runs*.csv``), read through the inferred setup as
``benchmarks/inferred_vs_setups.py`` reads it without ``setups.toml``, rewritten one cell at a
time into another spelling public tables use for the same thing (:data:`REWRITES`), and the
rewritten row's prediction compared with the unmodified row's: the same, or misread (another
prediction) or refused (not evaluated where the unmodified row was). Writes the counts and every
mismatch to ``benchmarks/results/spelling_robustness.md`` (``--out`` elsewhere).

Only what a prediction rests on is compared (:func:`reading`: the model, the parallel setup, the
system with its overrides, the framework profile and options, the metric and its measured value,
the FLOP count): a rewritten row that reads to the same is the same prediction without running
the backend, so only the rows whose reading moved are evaluated (the unmodified predictions are
evaluated once). A rewrite is applied only where it means the same for that row (a GPU form only
of the part the row's preset is, an FP8 recipe only where the row's FP8 already is that recipe, a
sharding name only where the row's framework makes the two equal).
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stage_core.parallel import ParallelConfig
from stage_explore.system import loading
from stage_explore.validation.csv_cells import read_csv
from stage_explore.validation.infer import row_cases
from stage_explore.validation.run import evaluate_cases
from stage_explore.validation.setups import Case, data_dir
from stage_explore.validation.suite import data_cases

RESULTS = Path(__file__).resolve().parent / "results" / "spelling_robustness.md"
#: This script's counts at main 56eeff9, before the s30 fuzz reader fixes (7 Dec 2026; the same
#: rewrites: 78,893 rewritten rows of 895): mismatches per family, printed beside the run's.
BEFORE_S30 = {"case and whitespace of free text": 62, "integers": 110, "recompute": 32,
              "model names": 21}  # fmt: skip

#: One rewrite of a row: its family, the column, the new cell.
Rewrite = tuple[str, str, str]
#: A family: (the unmodified row, its first case) -> the rewrites it makes of that row.
Family = Callable[[dict[str, str], Case], Iterator[Rewrite]]

#: The free-text columns (case and whitespace are not meaning there; ``url`` is: a URL's path is
#: case-sensitive, RFC 3986 section 6.2.2.1). Not the case of ``interconnect``: its rates' units
#: are told apart by case (``400 Gb/s`` is bits, ``600 GB/s`` bytes: upper- or lower-casing the
#: cell turns one into the other), nor of ``notes``: notes quote case-sensitive identifiers
#: (Megatron-Core's ``--pipeline-model-parallel-layout`` string ``Et*4|(t*4|)*14tmL``, whose
#: ``E`` / ``t`` / ``m`` / ``L`` are different stages' layers), so only their whitespace is
#: rewritten.
FREE_TEXT = ("source", "source_table", "model", "moe", "sp", "dp_sharding", "recompute",
             "precision", "gpu", "interconnect", "uncertain", "notes")  # fmt: skip
INTEGER = ("params_b", "layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "seq_len",
           "global_batch_seqs", "micro_batch", "tp", "pp", "dp", "cp", "ep", "vpp",
           "num_gpus")  # fmt: skip
MEASURED = ("iter_time_s", "tflops_per_gpu", "mfu_pct", "hfu_pct", "tokens_per_s_per_gpu",
            "peak_mem_gib")  # fmt: skip


def _case_space(row: dict[str, str], _: Case) -> Iterator[Rewrite]:
    """Every free-text cell lower-cased, upper-cased, padded with spaces, its spaces doubled."""
    for column in FREE_TEXT:
        cell = row.get(column, "")
        if not cell.strip():
            continue
        cased = column not in ("interconnect", "notes")
        for name, new in (
            ("lower", cell.lower()),
            ("upper", cell.upper()),
            ("padded", f"  {cell} "),
            ("spaces doubled", cell.replace(" ", "  ")),
        ):
            if cased or name not in ("lower", "upper"):
                yield f"case/space: {name}", column, new  # fmt: skip


def _integers(row: dict[str, str], _: Case) -> Iterator[Rewrite]:
    """An integer cell as tables print it: ``1,024`` (thousands), ``1024.0``, `` 1024 ``."""
    for column in INTEGER:
        cell = row.get(column, "").strip()
        if not re.fullmatch(r"\d+", cell):
            continue
        if int(cell) >= 1000:
            yield "integer: 1,024", column, f"{int(cell):,}"
        yield "integer: 1024.0", column, f"{cell}.0"
        yield "integer: spaced", column, f" {cell} "


def _measured(row: dict[str, str], _: Case) -> Iterator[Rewrite]:
    """A measured cell with thousands separators (``14,451``) or surrounding spaces."""
    for column in MEASURED:
        cell = row.get(column, "").strip()
        if not re.fullmatch(r"\d+(?:\.\d+)?", cell):
            continue
        whole, _dot, frac = cell.partition(".")
        if int(whole) >= 1000:
            yield "measured: 14,451", column, f"{int(whole):,}" + (f".{frac}" if frac else "")
        yield "measured: spaced", column, f" {cell} "


#: A yes / no cell as tables print it (Megatron's argument dumps: ``True``; NeMo's yamls:
#: ``true``; spreadsheets: ``Y``, ``✓``).
YES_FORMS = ("yes", "Yes", "YES", "True", "true", "on", "On", "✓", "✔", "Y", "enabled")
NO_FORMS = ("no", "No", "NO", "False", "false", "off", "Off", "✗", "N", "disabled")


def _booleans(row: dict[str, str], _: Case) -> Iterator[Rewrite]:
    """A bare yes / no cell (``sp``) in each of :data:`YES_FORMS` / :data:`NO_FORMS`."""
    cell = row.get("sp", "").strip().lower()
    forms = YES_FORMS if cell in ("yes", "true", "y", "on") else NO_FORMS
    if cell in ("yes", "true", "y", "on", "no", "false", "n", "off"):
        for form in forms:
            yield "boolean", "sp", form


#: Recompute cells (Korthikanti et al. 2022, arXiv 2205.05198: "full activation
#: recomputation", "selective activation recomputation"; PyTorch / DeepSpeed: "activation
#: checkpointing"; NeMo yamls: ``activations_checkpoint_granularity: full``).
RECOMPUTE_FORMS = {
    "full": ("Full", "FULL", "full recompute", "full recomputation",
             "full activation recomputation", "activation checkpointing: full",
             "full activation checkpointing", "recompute: full"),
    "selective": ("Selective", "selective recompute", "selective activation recomputation",
                  "activation checkpointing: selective", "recompute: selective"),
    "none": ("None", "no", "off", "no recompute", "no activation checkpointing",
             "activation checkpointing: none", "recompute: none"),
}  # fmt: skip


def _recompute(row: dict[str, str], _: Case) -> Iterator[Rewrite]:
    """A bare ``full`` / ``selective`` / ``none`` recompute cell (the remark after it kept)."""
    cell = row.get("recompute", "").strip()
    word = re.match(r"(full|selective|none)\b(.*)", cell)
    if word:
        for form in RECOMPUTE_FORMS[word.group(1)]:
            yield "recompute", "recompute", form + word.group(2)


#: Precision cells of one meaning each (NVIDIA NeMo / Megatron-Bridge recipe names
#: ``bf16_mixed``, PyTorch Lightning ``bf16-mixed``, PyTorch ``torch.bfloat16``).
PRECISION_FORMS = {
    "bf16": ("BF16", "bf16", "Bf16", "bfloat16", "BFloat16", "bf16_mixed", "bf16-mixed",
             "BF16 mixed", "mixed precision (bf16)", "BF16 AMP"),
    "fp16 mixed": ("FP16 mixed", "fp16-mixed", "fp16_mixed", "mixed precision (fp16)",
                   "FP16 AMP"),
    "fp8": ("FP8", "fp8", "Fp8", "float8"),
    "mxfp8": ("MXFP8", "mxfp8", "MX-FP8", "FP8-MX", "fp8 mxfp8"),
    "nvfp4": ("NVFP4", "nvfp4", "NV-FP4", "FP4 (NVFP4)"),
    "fp8-cs": ("FP8-CS", "FP8 current scaling", "fp8 (current scaling)", "FP8 CS",
               "FP8 (tensorwise)", "fp8 tensorwise"),
    "fp8 delayed": ("FP8 (delayed scaling)", "fp8 delayed scaling", "FP8-DS", "FP8 delayed"),
}  # fmt: skip


def _precision_kind(cell: str, parallel: ParallelConfig) -> str:
    """Which of :data:`PRECISION_FORMS` a bare precision cell is ("" for a cell with a
    remark): a bare ``fp8`` is also its recipe's kind where the framework's default makes it
    one (its delayed or tensorwise spellings mean that row's FP8 too)."""
    low = cell.strip().lower()
    if low in ("bf16", "bf16 mixed"):
        return "bf16"
    if low in ("fp16 mixed",) or low == "fp8-cs" or low in ("mxfp8", "fp8-mx", "nvfp4"):
        return {"fp8-mx": "mxfp8"}.get(low, low)
    if low == "fp8":
        return f"fp8/{parallel.fp8_recipe.value}"
    return ""


def _precision(row: dict[str, str], case: Case) -> Iterator[Rewrite]:
    """A bare precision cell in the other spellings of its meaning; a bare FP8 cell also in its
    framework's default recipe's names (and a bare recipe cell as ``FP8`` where that default is
    the recipe)."""
    if case.parallel is None:
        return
    kind = _precision_kind(row.get("precision", ""), case.parallel)
    forms: tuple[str, ...] = ()
    if kind.startswith("fp8/"):
        recipe = kind.split("/")[1]
        forms = PRECISION_FORMS["fp8"] + {
            "delayed": PRECISION_FORMS["fp8 delayed"],
            "tensorwise": PRECISION_FORMS["fp8-cs"],
        }.get(recipe, ())
    elif kind:
        forms = PRECISION_FORMS[kind]
    for form in forms:
        yield "precision", "precision", form


#: The forms vendors and tables print of one part (nvidia-smi's ``NVIDIA H100 80GB HBM3``, the
#: DGX / HGX names of its 8-GPU node, the SXM module names), per preset; a form is used only on
#: a row whose cell names nothing but the part (:func:`_plain_gpu`).
GPU_FORMS = {
    "h100-80gb": ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB", "H100 SXM", "H100 SXM5",
                  "NVIDIA H100-SXM5-80GB", "H100 80GB", "DGX H100", "HGX H100",
                  "nvidia h100"),
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", "A100 SXM4 80GB", "A100-80GB",
                  "A100 80G", "DGX A100 80GB", "NVIDIA A100 80GB"),
    "a100-40gb": ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB", "A100 40GB SXM", "A100-40G"),
    "h200": ("NVIDIA H200", "H200 SXM 141GB", "H200-SXM-141GB", "DGX H200", "HGX H200"),
    "b200": ("NVIDIA B200", "B200-SXM-180GB", "B200 SXM", "DGX B200", "HGX B200"),
    "b300": ("NVIDIA B300", "B300-SXM-270GB", "DGX B300", "HGX B300"),
    "gb200-nvl72": ("GB200 NVL72", "NVIDIA GB200 NVL72", "GB200-NVL72", "NVIDIA GB200"),
    "gb300-nvl72": ("GB300 NVL72", "NVIDIA GB300 NVL72", "NVIDIA GB300"),
    "mi300x": ("AMD Instinct MI300X", "MI300X OAM", "Instinct MI300X"),
    "mi325x": ("AMD Instinct MI325X", "MI325X OAM", "Instinct MI325X"),
    "mi355x": ("AMD Instinct MI355X", "Instinct MI355X"),
}  # fmt: skip
#: Words a gpu cell may hold beside the part's name and still name nothing else.
_PLAIN = {"nvidia", "amd", "instinct", "sxm", "sxm4", "sxm5", "sxm6", "hbm3", "hbm3e", "oam",
          "80gb", "40gb", "141gb", "180gb", "gpu", "gpus", "in", "nvl72"}  # fmt: skip


def _plain_gpu(cell: str) -> bool:
    """Whether a gpu cell names a part and nothing else (no cluster, power limit or memory
    size the rewrite would drop)."""
    words = [w for w in re.split(r"[\s()_,/-]+", cell.lower()) if w]
    parts = r"g?[abh]\d{3}|mi\d{3}x"
    return bool(words) and all(re.fullmatch(parts, w) or w in _PLAIN for w in words)


def _gpus(row: dict[str, str], case: Case) -> Iterator[Rewrite]:
    """A plain gpu cell in each of its part's vendor forms (:data:`GPU_FORMS`)."""
    cell = row.get("gpu", "")
    if case.system_overrides or case.system_file or not _plain_gpu(cell):
        return
    for form in GPU_FORMS.get(case.system, ()):
        yield "gpu", "gpu", form


#: Model names as Hugging Face repositories and papers write them: (pattern on the cell, forms
#: from its match).
MODEL_FORMS: tuple[tuple[str, Callable[[re.Match[str]], tuple[str, ...]]], ...] = (
    (r"Llama (\d(?:\.\d)?) (\d+)B", lambda m: (
        f"Llama-{m[1]}-{m[2]}B", f"meta-llama/Llama-{m[1]}-{m[2]}B", f"LLaMA{m[1]}-{m[2]}B",
        f"Llama{m[1]} {m[2]}B", f"llama-{m[1]}-{m[2]}b", f"Meta Llama {m[1]} {m[2]}B")),
    (r"Mixtral 8x7B", lambda m: ("Mixtral-8x7B", "mistralai/Mixtral-8x7B-v0.1",
                                 "Mixtral 8x7B v0.1")),
    (r"Nemotron-4 (\d+)B", lambda m: (f"Nemotron-4-{m[1]}B", f"nvidia/Nemotron-4-{m[1]}B",
                                      f"Nemotron 4 {m[1]}B")),
    (r"Qwen3-(\d+)B-A(\d+)B", lambda m: (f"Qwen/Qwen3-{m[1]}B-A{m[2]}B",
                                         f"Qwen3 {m[1]}B A{m[2]}B", f"Qwen3_{m[1]}B_A{m[2]}B")),
    (r"GPT OSS (\d+)B|GPT-OSS (\d+)B", lambda m: (f"gpt-oss-{m[1] or m[2]}b",
                                                  f"openai/gpt-oss-{m[1] or m[2]}b")),
    (r"DeepSeek-V3 671B|DeepSeekV3", lambda m: ("DeepSeek-V3", "deepseek-ai/DeepSeek-V3",
                                                "DeepSeek V3")),
    (r"GPT3 175B", lambda m: ("GPT-3 175B", "GPT-3-175B", "GPT3-175B")),
)  # fmt: skip


def _models(row: dict[str, str], _: Case) -> Iterator[Rewrite]:
    """A model cell naming only the model in the forms of :data:`MODEL_FORMS`."""
    cell = row.get("model", "").strip()
    for pattern, forms in MODEL_FORMS:
        match = re.fullmatch(pattern, cell)
        if match:
            for form in forms(match):
                yield "model name", "model", form


#: Sharding cells of one meaning each: DeepSpeed's ``zero_optimization.stage``, Megatron-Core's
#: distributed optimizer (its ZeRO-1: optimizer state sharded over data parallel, NVIDIA
#: Megatron-LM docs/source/api-guide/dist_optimizer.md), PyTorch FSDP's ``NO_SHARD`` (DDP).
SHARD_FORMS = {
    "zero-3": ("ZeRO stage 3", "ZeRO Stage-3", "zero3", "ZeRO 3", "zero_stage: 3"),
    "zero-1": ("ZeRO stage 1", "ZeRO Stage-1", "zero1", "ZeRO 1", "zero_stage: 1"),
    "none": ("no sharding", "None", "no ZeRO", "ZeRO-0"),
    "distributed optimizer": ("Distributed Optimizer", "distributed optimizer (ZeRO-1)",
                              "ZeRO-1", "use_distributed_optimizer: true", "dist optimizer"),
}  # fmt: skip
#: The frameworks whose distributed optimizer is ZeRO-1 (Megatron-Core, and the NeMo /
#: Megatron-Bridge / Megatron-LM launchers on it).
MEGATRON = re.compile(r"megatron|nemo|mlperf", re.IGNORECASE)


def _sharding(row: dict[str, str], case: Case) -> Iterator[Rewrite]:
    """A dp_sharding cell whose leading words are one of :data:`SHARD_FORMS`' meanings (the
    remark after it kept); the distributed optimizer only on a Megatron-Core framework."""
    cell = row.get("dp_sharding", "").strip()
    match = re.match(r"(zero-3|zero-1|none|(?:megatron-core )?distributed optimizer)\b(.*)",
                     cell, re.IGNORECASE)  # fmt: skip
    if not match:
        return
    kind = match.group(1).lower().removeprefix("megatron-core ")
    if kind == "distributed optimizer" and not MEGATRON.search(case.framework):
        return
    if kind == "none" and match.group(2).strip().startswith(":"):
        return  # "none: at dp_size 1 ...": a sentence, not a bare "none"
    for form in SHARD_FORMS[kind]:
        yield "sharding", "dp_sharding", form + match.group(2)


def _units(row: dict[str, str], _: Case) -> Iterator[Rewrite]:
    """Integers with their column's unit, as tables head them (``64 GPUs``, ``4096 tokens``)."""
    for column, unit in (("num_gpus", "GPUs"), ("seq_len", "tokens"),
                         ("global_batch_seqs", "sequences")):  # fmt: skip
        cell = row.get(column, "").strip()
        if re.fullmatch(r"\d+", cell):
            yield "units", column, f"{cell} {unit}"


REWRITES: tuple[tuple[str, Family], ...] = (
    ("case and whitespace of free text", _case_space), ("integers", _integers),
    ("measured numbers", _measured), ("booleans", _booleans), ("recompute", _recompute),
    ("precision", _precision), ("GPU names", _gpus), ("model names", _models),
    ("sharding", _sharding), ("units", _units),
)  # fmt: skip


def reading(case: Case) -> tuple[Any, ...]:
    """What a case's prediction rests on: equal readings predict the same."""
    return (case.metric, case.measured, case.system, case.system_file, case.system_overrides,
            case.backend_key, case.flops, case.model, case.parallel, case.reason == "")  # fmt: skip


@dataclass
class Outcome:
    """A rewrite's result on one row: ``same``, ``misread`` or ``refused``, and how."""

    kind: str
    family: str
    row: str
    rewrite: Rewrite
    said: str


def _predicted(cases: list[Case]) -> list[float]:
    return [r.predicted for r in evaluate_cases(cases)]


def fuzz(folder: Path) -> tuple[Counter[str], list[Outcome], int]:
    """``(tries per family, the mismatches, rows evaluated)`` of every rewrite of every row of
    ``folder``'s published-runs CSVs read without its setups.toml."""
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "data"
        shutil.copytree(folder, bare)
        (bare / "setups.toml").unlink(missing_ok=True)
        base = data_cases(bare)
        kept = {(c.file, c.line) for c in base.inferred if not c.reason.startswith("duplicate")}
        rows = {name: read_csv(bare / name) for name, _ in base.files}
    first: dict[tuple[str, int], list[Case]] = {}
    for name, line in sorted(kept):
        first[(name, line)] = row_cases(dict(rows[name][line - 1]), name, line, folder)
    flat = [c for cases in first.values() for c in cases]
    predicted = dict(zip(map(id, flat), _predicted(flat), strict=True))
    tries: Counter[str] = Counter()
    bad: list[Outcome] = []
    evaluated = 0
    for (name, line), cases in first.items():
        if not any(math.isfinite(predicted[id(c)]) for c in cases):
            continue  # refused unmodified: nothing to keep equal
        evaluated += 1
        row = dict(rows[name][line - 1])
        for family, make in REWRITES:
            for rewrite in make(row, cases[0]):
                if rewrite[2] == row.get(rewrite[1], ""):
                    continue
                tries[family] += 1
                new = row_cases({**row, rewrite[1]: rewrite[2]}, name, line, folder)
                outcome = _compare(cases, new, predicted, rewrite)
                if outcome is not None:
                    bad.append(Outcome(outcome[0], family, cases[0].id, rewrite, outcome[1]))
    return tries, bad, evaluated


def _compare(
    old: list[Case], new: list[Case], predicted: dict[int, float], rewrite: Rewrite
) -> tuple[str, str] | None:
    """The mismatch of a rewritten row's cases ``new`` against the unmodified ``old``, or None
    (the same readings, or other readings with the same predictions)."""
    if [reading(c) for c in new] == [reading(c) for c in old]:
        return None
    before = [predicted[id(c)] for c in old]
    after = _predicted(new) if len(new) == len(old) else []
    for case, a, b in zip(new, after, before, strict=False):
        if math.isfinite(b) and not math.isfinite(a):
            return "refused", case.reason or "not evaluated"
        if math.isfinite(b) and a != b:
            return "misread", f"{case.metric} {b:.6g} -> {a:.6g}"
    if len(new) != len(old):
        return "misread", f"{len(old)} cases -> {len(new)}"
    return None


def report(tries: Counter[str], bad: list[Outcome], evaluated: int, seconds: float) -> str:
    """The results page: counts per family, then every mismatch (one line each)."""
    by_family: Counter[str] = Counter(o.family for o in bad)
    lines = [
        "# Equivalent spellings of every package row",
        "",
        "`python benchmarks/spelling_robustness.py`: every row of the package CSVs read",
        "without setups.toml (the inferred setup), one cell at a time rewritten into another",
        "spelling of the same thing, the prediction compared with the unmodified row's.",
        f"{evaluated} rows evaluated unmodified; {sum(tries.values())} rewritten rows "
        f"({len(tries)} families); {len(bad)} mismatches; {seconds:.0f} s.",
        "",
        "| family | rewritten rows | mismatches | at 56eeff9 (before s30 fuzz) |",
        "|---|---:|---:|---:|",
    ]
    for family, _ in REWRITES:
        lines.append(
            f"| {family} | {tries[family]} | {by_family[family]} | {BEFORE_S30.get(family, 0)} |"
        )
    if bad:
        lines += ["", "Mismatches (kind, row, rewrite: column <- cell, what):", ""]
        lines += [f"- {o.kind} {o.row}: {o.rewrite[0]}: {o.rewrite[1]} <- {o.rewrite[2]!r}: "
                  f"{o.said[:200]}" for o in bad]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    # a system file's text parsed once (System is frozen): reading a row parses its preset
    # and cluster files, most of a rewritten row's time
    loading._parse = functools.lru_cache(maxsize=None)(loading._parse)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=data_dir())
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    tries, bad, evaluated = fuzz(args.data)
    text = report(tries, bad, evaluated, time.perf_counter() - start)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How good is the inferred setup? Every row of the package data evaluated twice: with its
hand-written ``setups.toml`` source, and with ``setups.toml`` removed (every row's setup
inferred from the CSV, :mod:`stage_explore.validation.infer`). Prints, per hand-written source,
the rows both evaluate and the mean absolute error of each; writes the table to
``benchmarks/results/inferred_vs_setups.md`` (``--out`` elsewhere, ``--rows`` adds a per-row
listing to the printed output).

Rows are matched by file and line; a throughput/time row is compared with a throughput/time row
(the compared metric may differ: a setup may compare ``iter_time_s`` where the inference takes
``tokens_per_s_per_gpu``), a memory row with a memory row.

What keeps the two apart where no rule can close the gap (:data:`LEFT`, printed under the table)
is information the CSV does not carry; docs/analytical.md ("The inferred setup against the
hand-written one: what is left", s15 infer6) has the readings.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from stage_explore.validation.infer import is_inferred
from stage_explore.validation.run import RowResult
from stage_explore.validation.setups import data_dir
from stage_explore.validation.suite import run_validation

RESULTS = Path(__file__).resolve().parent / "results" / "inferred_vs_setups.md"
#: Sources the inference cannot bring to their hand-written setup, and why (5 Dec 2026, s15
#: infer6; re-checked s16 infer7, s17 infer8, s18 infer9 and s37 ivs): what the hand-written
#: setup rests on that the CSV does not state.
LEFT = (
    "MBRIDGE-MOE-B200: MBM-B200-25.11-GPTOSS120B-64 states EP 8; the setup corrects the cell to "
    "the recipe's 64 (a default never overrides a stated cell).",
    "NAR21-T1: torch DDP and micro-batches 16 / 16 / 16 / 8 on rows 1-4, interleaving on rows "
    "6-9: the SC'21 artifact's run_table_1.sh per run, not a framework default.",
    "DGXC2504-H100-BF16 / -FP8: the Nemotron-4 340B rows state vpp 1 (the README's 'VP NA'); the "
    "recipe's launch.sh passes -vp 12.",
    "KOR22-F1 (memory) and KOR22-T5: the setups' fp32 gradients come from the paper's 18 bytes "
    "per parameter; Megatron-LM's fp16 default (--accumulate-allreduce-grads-in-fp32 off, which "
    "also turns gradient-accumulation fusion off: megatron/arguments.py of the sequence-"
    "parallelism release, NVIDIA/Megatron-LM 00129014) reduces in fp16, which the inference "
    "keeps (the agreement test's DEPARTURES).",
    "MBRIDGE: MBRIDGE25.11-DGX-H100-GPTOSS120B-64 states micro-batch 4; the setup corrects the "
    "cell to the recipe's 1 (csv_corrections: the page's GA 2 contradicts MBS 4 at PP 4).",
    "MCORE08: the setup's selective recompute, no dropout and untied embeddings are its own "
    "assumptions; the inference keeps Megatron's defaults (the README states none of them). "
    "Its vpp and userbuffers margins the inference reads as the setup does (s16 infer7).",
    "NEMO2403-LONGSEQ-H100: the fused loss and DistributedFusedAdam's fp32 state (memory only) "
    "of the launcher's llama2_7b.yaml at 064e676; the rows cite that yaml for their dims, not "
    "its version, and other versions do not name the fusion (as NEMO2407-H100 reads them; 0.1 "
    "points; s37 ivs).",
    "NEMO2407-H100: the fused loss of the Llama 2 7B, Llama 3 70B and Nemotron 8B / 340B rows "
    "comes from one version each of the launcher's per-model yamls (other versions and sizes "
    "do not name it), which the rows do not name; the bf16 gradient sync of the Llama rows "
    "(the launcher's example scripts) and of Nemotron-4 340B (its yaml) is inferred (s18 "
    "infer9, infer_launcher.py).",
    "VTRAIN: its file is read only through the setup's column renaming; without setups.toml it "
    "is not a published-runs CSV.",
)
Key = tuple[str, int, bool]


def _by_row(results: tuple[RowResult, ...]) -> dict[Key, RowResult]:
    """Results keyed by (file, line, is a memory row); the first of a key wins."""
    out: dict[Key, RowResult] = {}
    for result in results:
        key = (result.case.file, result.case.line, result.case.metric == "peak_mem_gib")
        out.setdefault(key, result)
    return out


def _mae(errors: list[float]) -> float:
    return 100 * sum(abs(e) for e in errors) / len(errors) if errors else float("nan")


def _gap(pairs: list[tuple[float, float]]) -> float:
    """Mean |inferred error − hand-written error| in points: how far the inferred setup is
    from the careful user's, whichever side of the measurement either falls."""
    return 100 * sum(abs(i - h) for h, i in pairs) / len(pairs) if pairs else float("nan")


def compare(folder: Path) -> tuple[list[str], list[str]]:
    """``(table lines, per-row lines)`` of the hand-written vs inferred comparison."""
    hand = _by_row(run_validation(folder).results)
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "data"
        shutil.copytree(folder, bare)
        (bare / "setups.toml").unlink()
        inferred = _by_row(run_validation(bare).results)
    groups: dict[tuple[bool, str], list[tuple[RowResult, RowResult | None]]] = defaultdict(list)
    for key, result in hand.items():
        if result.evaluated and not is_inferred(result.case.source):  # no hand-written setup
            groups[(key[2], result.case.source)].append((result, inferred.get(key)))
    table = [
        "| kind | hand-written source | rows | both evaluate | MAE hand-written % | "
        "MAE inferred % | outside 15 % (hand / inferred) | mean |inferred - hand| (points) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows: list[str] = []
    totals: dict[bool, list[tuple[float, float]]] = defaultdict(list)
    for (memory, source), pairs in sorted(groups.items()):
        both = [(h.error, i.error) for h, i in pairs if i is not None and i.evaluated]
        totals[memory] += both
        hand_errors, inferred_errors = [h for h, _ in both], [i for _, i in both]
        table.append(
            f"| {'memory' if memory else 'time'} | {source} | {len(pairs)} | {len(both)} | "
            f"{_mae(hand_errors):.1f} | {_mae(inferred_errors):.1f} | "
            f"{sum(abs(e) > 0.15 for e in hand_errors)} / "
            f"{sum(abs(e) > 0.15 for e in inferred_errors)} | {_gap(both):.1f} |"
        )
        for h, i in pairs:
            what = (
                f"{100 * i.error:+.1f}"
                if i is not None and i.evaluated
                else (f"not evaluated: {i.note}" if i is not None else "no inferred case")
            )
            rows.append(f"{source:28s} {h.case.id:40s} hand {100 * h.error:+6.1f}  inferred {what}")
    for memory in (False, True):
        both = totals[memory]
        table.append(
            f"| {'memory' if memory else 'time'} | **all** | | {len(both)} | "
            f"{_mae([h for h, _ in both]):.2f} | {_mae([i for _, i in both]):.2f} | "
            f"{sum(abs(h) > 0.15 for h, _ in both)} / {sum(abs(i) > 0.15 for _, i in both)} | "
            f"{_gap(both):.2f} |"
        )
    return table, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=data_dir())
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rows", action="store_true", help="print every row's two errors")
    args = parser.parse_args(argv)
    table, rows = compare(args.data)
    head = [
        "# Inferred setups vs the hand-written setups.toml",
        "",
        "`python benchmarks/inferred_vs_setups.py`: the package data evaluated with its",
        "setups.toml, and again with setups.toml removed (every row's setup inferred from",
        "the CSV). MAE over the rows both evaluate; the last column is the mean distance",
        "between the two predictions' errors (0: the inference sets the row up as the",
        "hand-written setup does).",
        "",
    ]
    left = ["", "What keeps the two apart where no rule can (the CSV does not carry it):", ""]
    left += [f"- {line}" for line in LEFT]
    text = "\n".join([*head, *table, *left]) + "\n"
    args.out.write_text(text, encoding="utf-8")
    print(text)
    if args.rows:
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Peak memory of the real ASTRA-sim binary against the size of its inputs.

For a ladder of STAGE workloads (GPT-3 125M, 2 to 8 layers, data parallel 8 to 1,024 ranks,
TP 1 or 2), write the ASTRA-sim inputs, run the binary under ``/usr/bin/time -v`` and record its
maximum resident set size, the world size and the bytes of the trace files. The least-squares
fit of ``peak_rss = a + b * world_size + c * trace_bytes`` is what
:mod:`stage_explore.astrasim.memory` uses to estimate a run before starting it.

Run: ``.venv/bin/python benchmarks/bench_astrasim_memory.py [--binary PATH] [--out FILE]``
(the binary defaults to ``ASTRA_SIM_BIN``, then ``PATH``). Writes
``benchmarks/results/astrasim_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from stage_core.models import get_flavor
from stage_core.parallel import ParallelConfig
from stage_explore.astrasim import AstraSimBackend, find_binary
from stage_explore.astrasim.run import command_line
from stage_explore.system import load_system

HERE = Path(__file__).resolve().parent
#: (layers, dp, tp): world sizes 8 … 1,024 at 2 layers, 4 and 8 layers at 64 ranks, and TP 2
#: (128 and 256 ranks). About 10 minutes on a loaded 2-core machine (1,024 ranks: ~4 min).
LADDER = [
    (2, 8, 1), (2, 32, 1), (2, 128, 1), (2, 256, 1), (2, 512, 1), (2, 1024, 1),
    (4, 64, 1), (8, 64, 1), (2, 64, 2), (8, 128, 2),
]  # fmt: skip


def measure(binary: Path, layers: int, dp: int, tp: int) -> dict[str, Any]:
    model = get_flavor("gpt3-125m").with_overrides(layers=layers, seq_len=256)
    parallel = ParallelConfig(dp=dp, tp=tp, global_batch=dp * 2)
    system = load_system("a100-80gb")
    with tempfile.TemporaryDirectory(prefix="stage-astra-mem-") as folder:
        inputs = AstraSimBackend().write_inputs(model, parallel, system, folder)
        trace_bytes = sum(path.stat().st_size for path in Path(folder).glob("workload.*.et"))
        command = ["/usr/bin/time", "-v", *command_line(binary, inputs)]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - started
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    assert match, done.stderr[-2000:]
    finished = len(re.findall(r"sys\[\d+\] finished", done.stdout + done.stderr))
    return {
        "layers": layers,
        "dp": dp,
        "tp": tp,
        "world_size": inputs.world_size,
        "trace_bytes": trace_bytes,
        "peak_rss_bytes": int(match.group(1)) * 1024,
        "seconds": round(seconds, 2),
        "exit_status": done.returncode,
        "ranks_finished": finished,
    }


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    design = np.array([[1.0, row["world_size"], row["trace_bytes"]] for row in rows])
    peak = np.array([float(row["peak_rss_bytes"]) for row in rows])
    (base, per_rank, per_trace_byte), *_ = np.linalg.lstsq(design, peak, rcond=None)
    predicted = design @ np.array([base, per_rank, per_trace_byte])
    return {
        "model": "peak_rss_bytes = base_bytes + per_rank_bytes * world_size "
        "+ per_trace_byte * trace_bytes",
        "base_bytes": float(base),
        "per_rank_bytes": float(per_rank),
        "per_trace_byte": float(per_trace_byte),
        "max_relative_error": float(np.max(np.abs(predicted - peak) / peak)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", help="ASTRA-sim binary (default: ASTRA_SIM_BIN, then PATH)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "astrasim_memory.json")
    args = parser.parse_args()
    binary = find_binary(args.binary)
    rows = []
    for layers, dp, tp in LADDER:
        row = measure(binary, layers, dp, tp)
        rows.append(row)
        print(json.dumps(row))
    result = {
        "binary": binary.name,
        "machine": f"{platform.machine()} {platform.system()}, {platform.python_version()}",
        "runs": rows,
        "fit": fit([row for row in rows if row["ranks_finished"] == row["world_size"]]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["fit"], indent=2))


if __name__ == "__main__":
    main()

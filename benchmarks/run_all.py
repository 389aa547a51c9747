"""Run every benchmark in this folder (``make bench``); each prints its own table.

Benchmarks are not tests: they measure speed and scale on this machine and write their numbers
to ``benchmarks/results/``. Pass ``--quick`` for the short variants.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BENCHMARKS = (
    "bench_lowering",
    "bench_trace",
    "bench_analytical",
    "bench_explore",
    "bench_astra_vs_analytical",  # needs ASTRA-sim (ASTRA_SIM_BIN or PATH); skipped without it
)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    quick = ["--quick"] if "--quick" in args else []
    for name in BENCHMARKS:
        module = importlib.import_module(name)
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        code = module.main(quick) if quick else module.main([])
        print(f"({name}: {time.perf_counter() - start:.1f} s)", flush=True)
        if code:
            return int(code)
    return 0


if __name__ == "__main__":
    sys.exit(main())

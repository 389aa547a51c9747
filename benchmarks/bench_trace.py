"""Trace generation at scale: wall time and peak memory from 1K to 128K ranks.

Each point runs ``stage trace`` in a fresh process (so peak RSS is that run's own) and records
wall seconds, peak RSS, files and bytes written:

- Chakra files for every rank, Llama-3-70B dimensions with 2 layers (tp 8, cp 2, pp 2, dp
  scaled), up to 32,768 ranks (the issue's target: ≤ 60 s and ≤ 2 GiB at 32K);
- the symmetric form, Llama-3-405B at full depth (126 layers, tp 8, cp 8, pp 2, 16 micro-
  batches per step), up to 131,072 ranks (target: ≤ 10 s).

Run: ``python benchmarks/bench_trace.py [--quick]`` (``--quick`` stops at 4K ranks).
Results are printed as a table and written to ``benchmarks/results/trace.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


_CHILD = (
    "import resource, sys\n"
    "from stage_explore.cli import main\n"
    "code = main(sys.argv[2:])\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
    "sys.exit(code)\n"
)


def _run(args: list[str]) -> dict[str, float | int | str]:
    """Run ``stage trace ARGS`` in a fresh process; its own peak RSS is reported back."""
    out = Path(tempfile.mkdtemp(prefix="stage-bench-"))
    rss_file = out.with_suffix(".rss")
    command = [
        sys.executable,
        "-c",
        _CHILD,
        str(rss_file),
        "trace",
        *args,
        "--out",
        str(out),
        "--quiet",
    ]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise SystemExit(f"benchmark run failed: {' '.join(args)}\n{result.stderr}")
    peak_kib = int(rss_file.read_text())
    rss_file.unlink()
    files = sum(1 for _ in out.iterdir())
    size = sum(p.stat().st_size for p in out.iterdir())
    shutil.rmtree(out, ignore_errors=True)
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "files": files,
        "bytes": size,
        "summary": result.stdout.strip(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="stop at 4,096 ranks")
    args = parser.parse_args(argv)
    chakra_dp = [64, 256, 1024] if not args.quick else [64, 256]
    symmetric_dp = [64, 256, 1024] if not args.quick else [64]
    rows = []
    for dp in chakra_dp:
        ranks = dp * 8 * 2 * 2
        flags = [
            "--model",
            "llama3-70b",
            "--layers",
            "2",
            "--dp",
            str(dp),
            "--tp",
            "8",
            "--cp",
            "2",
            "--pp",
            "2",
            "--sp",
            "--format",
            "chakra",
        ]
        rows.append(
            {"form": "chakra", "model": "llama3-70b (2 layers)", "ranks": ranks, **_run(flags)}
        )
    for dp in symmetric_dp:
        ranks = dp * 8 * 8 * 2
        flags = [
            "--model",
            "llama3-405b",
            "--dp",
            str(dp),
            "--tp",
            "8",
            "--cp",
            "8",
            "--pp",
            "2",
            "--sp",
            "--global-batch",
            str(dp * 16),
            "--format",
            "symmetric",
        ]
        rows.append(
            {
                "form": "symmetric",
                "model": "llama3-405b (126 layers)",
                "ranks": ranks,
                **_run(flags),
            }
        )
    print(
        f"{'form':10s} {'model':26s} {'ranks':>8s} {'seconds':>8s} "
        f"{'peak RSS MiB':>13s} {'files':>7s} {'bytes':>12s}"
    )
    for row in rows:
        print(
            f"{row['form']:10s} {row['model']:26s} {row['ranks']:>8d} {row['seconds']:>8.2f} "
            f"{row['peak_rss_mib']:>13.1f} {row['files']:>7d} {row['bytes']:>12d}"
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "trace.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

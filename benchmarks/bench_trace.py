"""Trace generation at scale: wall time, CPU time and peak memory, and where the time goes.

1. **The issue's set** (issue #10, target ≤ 15 s wall on 2 cores): Chakra files for 32,768
   ranks, Llama-3-70B dimensions with 4 layers, dp 512 × tp 8 × cp 2 × pp 4 with sequence
   parallelism, sequence 8,192, global batch 2,048 with the default micro-batch of 1 (so 4
   micro-batches per step under 1F1B), i.e. ``stage trace --model llama3-70b --layers 4 --dp
   512 --tp 8 --cp 2 --pp 4 --sp --seq-len 8192 --global-batch 2048 --out DIR``. It runs
   ``--repeat`` times (default 3), each in a fresh process writing into a fresh directory;
   best and median wall seconds are reported with each run's user and system CPU seconds
   (the writer forks one worker per CPU, up to 4: CPU time counts every process).
2. **Where the time goes**: the same set written once in-process with one worker under
   cProfile, reported per phase (import, lowering, rank classes, encoding, file system calls).
3. **Scale points**: Chakra files for Llama-3-70B with 2 layers (tp 8, cp 2, pp 2, dp scaled)
   from 2K to 32K ranks, and the symmetric form of Llama-3-405B at full depth up to 131,072
   ranks.

The machine may be shared: wall times then read slow (CPU seconds much less so); the load
average at the start of each run is recorded.

Output directories are all removed at the end, not after each run. On an ext4 file system
without a journal (this machine's), creating a file skips every inode freed in the last 60 to
300 seconds after reading its on-disk record (``recently_deleted`` in the inode allocator, seen
with ``perf`` taking 60 % of a run), so creating 32,768 files right after deleting 32,768 costs
up to 30 s of kernel time: removing each run's output before the next would measure the
previous run's deletion, not the writer. Run: ``python benchmarks/bench_trace.py [--quick]
[--repeat N] [--no-profile]`` (``--quick``: 2 runs of the issue's set with no scale points
beyond 8K). Results are printed and written to ``benchmarks/results/trace.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

ISSUE_FLAGS = [
    "--model", "llama3-70b", "--layers", "4", "--dp", "512", "--tp", "8", "--cp", "2",
    "--pp", "4", "--sp", "--seq-len", "8192", "--global-batch", "2048",
]  # fmt: skip

_CHILD = (
    "import resource, sys\n"
    "from stage_explore.cli import main\n"
    "code = main(sys.argv[2:])\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
    "sys.exit(code)\n"
)

_PROFILE = """
import cProfile, json, pstats, resource, sys, time
start = time.perf_counter()
from stage_core.lower.emit import write_chakra
from stage_core.lower.program import lower
from stage_explore.cli import build_parser
from stage_explore.cli.options import parse_workload
imported = time.perf_counter()
args = build_parser().parse_args(["trace", *sys.argv[2:], "--out", sys.argv[1]])
profile = cProfile.Profile()
profile.enable()
model, parallel = parse_workload(args)
programs = lower(model, parallel)
lowered = time.perf_counter()
written = write_chakra(programs, sys.argv[1], workers=1)
profile.disable()
end = time.perf_counter()
usage = resource.getrusage(resource.RUSAGE_SELF)
stats = pstats.Stats(profile).stats
def cumulative(suffix):
    return round(sum(v[3] for k, v in stats.items() if f"{k[0]}:{k[2]}".endswith(suffix)), 3)
def own(suffix):
    return round(sum(v[2] for k, v in stats.items() if f"{k[0]}:{k[2]}".endswith(suffix)), 3)
print(json.dumps({
    "import_s": round(imported - start, 3),
    "lower_s": round(lowered - imported, 3),
    "write_s": round(end - lowered, 3),
    "user_cpu_s": round(usage.ru_utime, 2),
    "system_cpu_s": round(usage.ru_stime, 2),
    "profiled": {
        "class_columns (groups, peers: numpy)": cumulative("emit.py:class_columns"),
        "compile templates (once per stage)": cumulative("encode.py:compile"),
        "group ids (one pass over the ranks)": own("writer.py:write_class_columns"),
        "emit_file (per-rank bytes)": cumulative("encode.py:emit_file"),
        "os.open": own("~:<built-in method posix.open>"),
        "os.write": own("~:<built-in method posix.write>"),
        "os.close": own("~:<built-in method posix.close>"),
    },
    "files": written.world_size + 1,
    "bytes": written.byte_count,
}))
"""


def _loadavg() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return -1.0


#: Output directories, removed together at the end (see the module docstring).
_OUTPUTS: list[Path] = []


def _cleanup() -> None:
    for path in _OUTPUTS:
        shutil.rmtree(path, ignore_errors=True)
    _OUTPUTS.clear()


def _run(args: list[str]) -> dict[str, Any]:
    """Run ``stage trace ARGS`` in a fresh process; its own peak RSS and CPU are reported."""
    out = Path(tempfile.mkdtemp(prefix="stage-bench-"))
    _OUTPUTS.append(out)
    rss_file = out.with_suffix(".rss")
    command = [sys.executable, "-c", _CHILD, str(rss_file), "trace", *args, "--out", str(out)]
    load = _loadavg()
    before = os.times()
    start = time.perf_counter()
    result = subprocess.run([*command, "--quiet"], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = os.times()
    if result.returncode != 0:
        _cleanup()
        raise SystemExit(f"benchmark run failed: {' '.join(args)}\n{result.stderr}")
    peak_kib = int(rss_file.read_text())
    rss_file.unlink()
    files = sum(1 for _ in out.iterdir())
    size = sum(p.stat().st_size for p in out.iterdir())
    return {
        "seconds": round(seconds, 2),
        "user_cpu_s": round(after.children_user - before.children_user, 2),
        "system_cpu_s": round(after.children_system - before.children_system, 2),
        "load_average_1min_at_start": load,
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "files": files,
        "bytes": size,
        "summary": result.stdout.strip(),
    }


def issue_set(repeat: int) -> dict[str, Any]:
    """The issue's 32,768-rank set, ``repeat`` fresh runs."""
    runs = []
    for index in range(repeat):
        runs.append(_run(ISSUE_FLAGS))
        print(f"  issue set run {index + 1}/{repeat}: {runs[-1]['seconds']} s", flush=True)
    walls = [run["seconds"] for run in runs]
    return {
        "command": "stage trace " + " ".join(ISSUE_FLAGS) + " --out DIR",
        "micro_batch": 1,
        "target_seconds": 15,
        "cpus": os.cpu_count(),
        "best_seconds": min(walls),
        "median_seconds": statistics.median(walls),
        "runs": runs,
    }


def profile_issue_set() -> dict[str, Any]:
    """Phases of one in-process, single-worker write of the issue's set under cProfile."""
    out = Path(tempfile.mkdtemp(prefix="stage-bench-profile-"))
    _OUTPUTS.append(out)
    result = subprocess.run(
        [sys.executable, "-c", _PROFILE, str(out), *ISSUE_FLAGS],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        _cleanup()
        raise SystemExit(f"profile run failed\n{result.stderr}")
    phases: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    phases["note"] = (
        "one worker, under cProfile (which slows the Python parts); file system calls are "
        "kernel time and vary with the disk and with other processes writing"
    )
    return phases


def scale_points(quick: bool) -> list[dict[str, Any]]:
    rows = []
    for dp in [64, 256] if quick else [64, 256, 1024]:
        flags = [
            "--model", "llama3-70b", "--layers", "2", "--dp", str(dp), "--tp", "8",
            "--cp", "2", "--pp", "2", "--sp", "--format", "chakra",
        ]  # fmt: skip
        row = {"form": "chakra", "model": "llama3-70b (2 layers)", "ranks": dp * 32}
        rows.append({**row, **_run(flags)})
    for dp in [64] if quick else [64, 256, 1024]:
        flags = [
            "--model", "llama3-405b", "--dp", str(dp), "--tp", "8", "--cp", "8", "--pp", "2",
            "--sp", "--global-batch", str(dp * 16), "--format", "symmetric",
        ]  # fmt: skip
        row = {"form": "symmetric", "model": "llama3-405b (126 layers)", "ranks": dp * 128}
        rows.append({**row, **_run(flags)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 runs, scale points to 8K")
    parser.add_argument("--repeat", type=int, default=None, help="runs of the issue's set")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled run")
    args = parser.parse_args(argv)
    repeat = args.repeat if args.repeat is not None else (2 if args.quick else 3)
    try:
        report: dict[str, Any] = {"python": sys.version.split()[0], "issue_set": issue_set(repeat)}
        if not args.no_profile:
            report["profile"] = profile_issue_set()
        report["scale"] = scale_points(args.quick)
    finally:
        _cleanup()
    issue = report["issue_set"]
    print(
        f"issue set (32,768 ranks): best {issue['best_seconds']:.2f} s, median "
        f"{issue['median_seconds']:.2f} s wall (target {issue['target_seconds']} s); CPU user/sys "
        + ", ".join(f"{r['user_cpu_s']}/{r['system_cpu_s']}" for r in issue["runs"])
    )
    if "profile" in report:
        print("where the time goes (one worker, profiled):")
        for name, value in report["profile"].items():
            if name != "note":
                print(f"  {name}: {value}")
    print(
        f"{'form':10s} {'model':26s} {'ranks':>8s} {'seconds':>8s} "
        f"{'peak RSS MiB':>13s} {'files':>7s} {'bytes':>12s}"
    )
    for row in report["scale"]:
        print(
            f"{row['form']:10s} {row['model']:26s} {row['ranks']:>8d} {row['seconds']:>8.2f} "
            f"{row['peak_rss_mib']:>13.1f} {row['files']:>7d} {row['bytes']:>12d}"
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "trace.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

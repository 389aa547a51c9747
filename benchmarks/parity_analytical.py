"""Parity of two analytical-backend code paths: the same random points, bit for bit.

A speed change to the analytical backend must not change any result. This script draws a
seeded set of design points — several models (dense GPT and Llama, Mixtral and DeepSeek MoE),
systems (A100, H100, B200), every framework profile, every schedule, ZeRO 0–3, recompute, sp,
cp (all-gather and ring), ep, fp8, uneven pipeline splits — evaluates them with one
:class:`AnalyticalBackend` per framework (memos shared across points, as in a study) and
writes every output field, floats as ``float.hex`` (exact), to a JSON file. Run it on two
checkouts with the same venv and compare:

    PYTHONPATH=/tmp/base python benchmarks/parity_analytical.py --out /tmp/base.json
    PYTHONPATH=/work/main python benchmarks/parity_analytical.py --out /tmp/new.json
    python benchmarks/parity_analytical.py --compare /tmp/base.json /tmp/new.json

Both checkouts must be at the same commit apart from the code compared (other modules'
constants change results too). Not a unit test: it needs two checkouts. ``--sweep N`` adds the
first ``N`` candidates of :mod:`bench_analytical`'s sweep (GPT-3 175B on A100, up to 16
stages and 1,536 micro-batches: long pipelines, the extrapolated and the simulated paths).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.models.spec import ModelSpec
from stage_core.parallel import ParallelConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import FRAMEWORKS
from stage_explore.system import load_system

#: (flavor, layer count to keep binding quick or None, sequence length or None)
MODELS: tuple[tuple[str, int | None, int | None], ...] = (
    ("gpt3-175b", None, None),
    ("megatron-gpt-1.7b", 8, None),
    ("llama3-8b", 8, 4096),
    ("llama3-70b", 16, 4096),
    ("mixtral-8x7b", 8, 4096),
    ("deepseek-v2-lite", 9, 4096),
)
SYSTEMS = ("a100-80gb", "h100-80gb", "b200")


def _model(name: str, layers: int | None, seq_len: int | None) -> ModelSpec:
    model = get_flavor(name)
    overrides: dict[str, Any] = {}
    if layers is not None:
        overrides["layers"] = layers
    if seq_len is not None:
        overrides["seq_len"] = seq_len
    return model.with_overrides(**overrides) if overrides else model


def _draw(rng: random.Random, model: ModelSpec) -> ParallelConfig:
    tp = rng.choice((1, 2, 4, 8))
    pp = rng.choice((1, 1, 2, 4, 8))
    dp = rng.choice((1, 2, 4, 8, 16, 64))
    cp = rng.choice((1, 1, 1, 2))
    schedules = (("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("zb", 1), ("dualpipe", 1))
    schedule, vpp = rng.choice(schedules)
    micro_batch = rng.choice((1, 2, 4))
    kwargs: dict[str, Any] = {
        "dp": dp, "tp": tp, "pp": pp, "cp": cp, "micro_batch": micro_batch,
        "global_batch": dp * micro_batch * rng.choice((1, 2, 4, 8, 16, 32)) * max(pp, 1),
        "sp": rng.random() < 0.5, "recompute": rng.choice(("none", "selective", "full")),
        "zero": rng.choice((0, 1, 2, 3)), "schedule": schedule if pp > 1 else "1f1b",
        "vpp": vpp if pp > 1 else 1, "cp_style": rng.choice(("allgather", "ring")),
    }  # fmt: skip
    if model.is_moe:
        kwargs["ep"] = rng.choice((1, 2, 4, 8))
    if pp > 1 and rng.random() < 0.3:  # uneven split: move layers to the last stage
        if kwargs["vpp"] == 1:
            base = model.layers // pp
            if base >= 2:
                counts = [base] * pp
                counts[0] -= 1
                counts[-1] += 1 + model.layers - base * pp
                kwargs["pp_layers"] = tuple(counts)
    if rng.random() < 0.2:
        kwargs["precision"] = "fp8"
    config = ParallelConfig(**kwargs)
    config.validate(model)
    return config


def points(count: int, seed: int) -> list[tuple[int, str, str, ParallelConfig]]:
    """``count`` valid (model index, system, framework, config) points."""
    rng = random.Random(seed)
    models = [_model(*spec) for spec in MODELS]
    result: list[tuple[int, str, str, ParallelConfig]] = []
    attempts = 0
    while len(result) < count and attempts < 200 * count:
        attempts += 1
        index = rng.randrange(len(MODELS))
        system = rng.choice(SYSTEMS)
        framework = rng.choice(tuple(FRAMEWORKS))
        try:
            config = _draw(rng, models[index])
        except (ConfigError, ValueError):
            continue
        if config.precision == "fp8" and system == "a100-80gb":
            continue
        result.append((index, system, framework, config))
    return result


def _exact(value: Any) -> Any:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else value.hex()
    if isinstance(value, dict):
        return {str(k): _exact(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    return value


def run(count: int, seed: int, sweep: int = 0) -> list[dict[str, Any]]:
    models = [_model(*spec) for spec in MODELS]
    systems = {name: load_system(name) for name in SYSTEMS}
    backends = {name: AnalyticalBackend(framework=name) for name in FRAMEWORKS}
    drawn = points(count, seed)
    if sweep:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_analytical import MODEL, SYSTEM, candidates

        index = next(i for i, spec in enumerate(MODELS) if spec == (MODEL, None, None))
        framework = AnalyticalBackend().framework.name
        drawn += [(index, SYSTEM, framework, config) for config in candidates(sweep)]
    rows = []
    for index, system, framework, config in drawn:
        label = f"{MODELS[index][0]} {system} {framework} {config}"
        try:
            result = backends[framework].evaluate(models[index], config, systems[system])
            rows.append({"point": label, "result": _exact(result.to_dict())})
        except ConfigError as error:
            rows.append({"point": label, "error": str(error)})
    return rows


def compare(first: Path, second: Path) -> int:
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    if len(a) != len(b):
        print(f"different numbers of points: {len(a)} vs {len(b)}")
        return 1
    differing = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    for x, y in differing[:10]:
        print("DIFFERS:", x["point"])
        for key in sorted(set(x.get("result", {})) | set(y.get("result", {}))):
            if x.get("result", {}).get(key) != y.get("result", {}).get(key):
                print(f"  {key}: {x.get('result', {}).get(key)} vs {y.get('result', {}).get(key)}")
    feasible = sum(1 for x in a if x.get("result", {}).get("feasible"))
    errors = sum(1 for x in a if "error" in x)
    print(f"{len(a)} points ({feasible} feasible, {errors} ConfigError): {len(differing)} differ")
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results here")
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sweep", type=int, default=0, help="add N bench_analytical candidates")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"))
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("give --out FILE or --compare A B")
    rows = run(args.count, args.seed, args.sweep)
    args.out.write_text(json.dumps(rows, indent=0) + "\n")
    print(f"{len(rows)} points written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The backend contract (:class:`stage_explore.evaluation.BaseBackend`), checked for every
backend by one battery, in the style of Optuna's ``testing/pytest_samplers.py``: a backend joins
by one entry in :data:`BACKENDS` (a name and a factory; a factory may skip with its reason).

The battery: the breakdown adds up to the step time; an infeasible point (out of memory, more
GPUs than the system has) is a result with a reason, not an exception; bad input (a tp that does
not divide the heads, a precision the accelerator has no peak for) raises ``ConfigError``; the
same point gives the same evaluation on the instance and on a fresh one; a pickled backend
evaluates the same. Every built-in backend (``search.backends.BUILTIN_BACKENDS``, what a study's
``[backend] name`` resolves to) must be in :data:`BACKENDS`, and its ``evaluate`` is typed
``(ModelSpec, ParallelConfig, System) -> Evaluation``. The analytical backend joins once per
framework profile (each is another timing policy and other costs). The ASTRA-sim backend needs
the real binary (``ASTRA_SIM_BIN`` or ``PATH``) and is skipped with the reason where it is
absent.
"""

from __future__ import annotations

import functools
import math
import pickle
import typing
from collections.abc import Callable
from dataclasses import replace

import pytest

from stage_core.errors import ConfigError
from stage_core.lower.memory import memory_report
from stage_core.lower.program import lower
from stage_core.lower.program_node import OPTIMIZER
from stage_core.models import ModelSpec, get_flavor
from stage_core.parallel import ParallelConfig, Precision
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS
from stage_explore.analytical.trace_mode import trace_step
from stage_explore.evaluation import BaseBackend, Evaluation
from stage_explore.search.backends import BUILTIN_BACKENDS, resolve_backend
from stage_explore.system import load_system
from stage_explore.system.model import System


def _astra_sim() -> BaseBackend:
    from stage_explore.astrasim import AstraSimBackend, find_binary

    try:
        find_binary(None)
    except ConfigError as error:
        pytest.skip(f"ASTRA-sim is not installed here ({error})")
    return AstraSimBackend(timeout_s=300)


#: Every backend that fulfils the contract: (name, factory). The analytical backend joins once
#: per framework profile: each profile is another timing policy and other costs.
BACKENDS: list[tuple[str, Callable[[], BaseBackend]]] = [
    ("analytical", AnalyticalBackend),
    *(
        (f"analytical:{name}", functools.partial(AnalyticalBackend, framework=name))
        for name in sorted(FRAMEWORKS)
        if name != DEFAULT_FRAMEWORK
    ),
    ("astra-sim", _astra_sim),
]

SMALL = get_flavor("megatron-gpt-1.7b").with_overrides(layers=2)
SYSTEM = "a100-80gb"
#: Feasible points exercising tp, pp (1F1B and interleaved), dp, sp, ZeRO and recompute.
FEASIBLE = [
    ParallelConfig(tp=2, pp=1, dp=2, micro_batch=1, global_batch=4),
    ParallelConfig(tp=2, pp=2, dp=1, sp=True, micro_batch=1, global_batch=4, recompute="selective"),
    ParallelConfig(tp=1, pp=2, dp=2, vpp=1, zero=1, micro_batch=2, global_batch=8),
]


@pytest.fixture(params=[name for name, _ in BACKENDS], scope="module")
def factory(request: pytest.FixtureRequest) -> Callable[[], BaseBackend]:
    make = dict(BACKENDS)[request.param]
    make()  # skips here, with the reason, when the backend cannot run on this machine
    return make


@pytest.fixture(scope="module")
def backend(factory: Callable[[], BaseBackend]) -> BaseBackend:
    return factory()


@pytest.fixture(scope="module")
def system() -> System:
    return load_system(SYSTEM)


def _check(result: Evaluation) -> None:
    assert isinstance(result, Evaluation)
    assert result.num_gpus > 0


def outputs(result: Evaluation) -> dict[str, object]:
    """What the contract holds deterministic: everything but ``extra`` (diagnostics such as a
    simulator's wall time)."""
    return {k: v for k, v in result.to_dict().items() if k != "extra"}


@pytest.mark.parametrize("parallel", FEASIBLE, ids=["tp-dp", "tp-pp-sp-selective", "pp-dp-zero1"])
def test_breakdown_adds_up_to_the_step_time(
    backend: BaseBackend, system: System, parallel: ParallelConfig
) -> None:
    result = backend.evaluate(SMALL, parallel, system)
    _check(result)
    assert result.feasible, result.reason
    assert result.step_time_s > 0
    assert result.breakdown
    assert all(value >= 0 for value in result.breakdown.values()), result.breakdown
    assert math.isclose(sum(result.breakdown.values()), result.step_time_s, rel_tol=1e-9)


def test_out_of_memory_is_a_result_with_a_reason(backend: BaseBackend, system: System) -> None:
    # 175B parameters over tp 8 and no sharding: ~22B per GPU, ~350 GB of model states.
    big = get_flavor("megatron-gpt-175b")
    result = backend.evaluate(big, ParallelConfig(tp=8, micro_batch=1, global_batch=1), system)
    _check(result)
    assert not result.feasible
    assert "memory" in result.reason
    assert result.peak_memory_bytes > system.accelerator.memory_bytes


def test_more_gpus_than_the_system_has_is_a_result(backend: BaseBackend) -> None:
    tiny = replace(load_system(SYSTEM), network=load_system(SYSTEM).network[:1])  # one node: 8
    result = backend.evaluate(SMALL, ParallelConfig(tp=2, dp=8, global_batch=8), tiny)
    assert not result.feasible
    assert "16" in result.reason and "8" in result.reason


@pytest.mark.parametrize(
    ("model", "parallel", "match"),
    [
        (SMALL, ParallelConfig(tp=2, global_batch=1, precision=Precision.FP8), "fp8"),
        (SMALL.with_overrides(heads=24), ParallelConfig(tp=16, global_batch=1), "tp"),
    ],
    ids=["fp8-on-a100", "tp-does-not-divide-heads"],
)
def test_bad_input_raises_config_error(
    backend: BaseBackend, system: System, model: ModelSpec, parallel: ParallelConfig, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        backend.evaluate(model, parallel, system)


def test_deterministic_on_the_instance_and_a_fresh_one(
    backend: BaseBackend, factory: Callable[[], BaseBackend], system: System
) -> None:
    parallel = FEASIBLE[1]
    first = outputs(backend.evaluate(SMALL, parallel, system))
    assert outputs(backend.evaluate(SMALL, parallel, system)) == first
    assert outputs(factory().evaluate(SMALL, parallel, system)) == first


def test_picklable_and_the_copy_evaluates_the_same(backend: BaseBackend, system: System) -> None:
    copy = pickle.loads(pickle.dumps(backend))
    assert type(copy) is type(backend)
    for parallel in FEASIBLE:
        expected = outputs(backend.evaluate(SMALL, parallel, system))
        assert outputs(copy.evaluate(SMALL, parallel, system)) == expected


def test_every_built_in_backend_joins_the_battery() -> None:
    assert set(BUILTIN_BACKENDS) <= {name for name, _ in BACKENDS}


@pytest.mark.parametrize("name", sorted(BUILTIN_BACKENDS))
def test_evaluate_is_typed_as_the_contract(name: str) -> None:
    # the class a study's `[backend] name` resolves to (imported only, not run: no binary needed)
    cls = resolve_backend(name)
    assert isinstance(cls, type) and issubclass(cls, BaseBackend)
    assert cls.name == name  # what its evaluations report as `backend`
    hints = typing.get_type_hints(cls.evaluate)
    assert hints == {
        "model": ModelSpec, "parallel": ParallelConfig, "system": System, "return": Evaluation
    }  # fmt: skip


#: ``(flops, bytes read + written)`` per parameter of each kind's update with an fp32 master,
#: written out from ``optimizer_kinds.py``'s module docstring (s37 optim2).
STEP_PER_PARAM = {"adam": (12, 30), "adam_bf16_moments": (12, 22), "sgd_momentum": (4, 22),
                  "sgd": (2, 14)}  # fmt: skip
#: The state bytes per parameter with an fp32 master (the same docstring).
STATE_PER_PARAM = {"adam": 12, "adam_bf16_moments": 8, "sgd_momentum": 8, "sgd": 4}


@pytest.mark.parametrize("kind", sorted(STEP_PER_PARAM))
def test_the_optimizer_kind_reaches_the_lowering_and_the_trace_mode(
    kind: str, system: System
) -> None:
    """One model, every backend (s37 optim2): the profile's ``optimizer`` sets the lowered
    optimizer node (the generator's programs and Chakra traces) and its state bytes, and the
    trace mode times that node as the levelled mode times the optimizer."""
    parallel = FEASIBLE[0]  # one pipeline stage, ZeRO 0
    adam = lower(SMALL, parallel)
    programs = lower(SMALL, parallel, optimizer=kind)
    ((stage_adam, stage),) = zip(adam.stages, programs.stages, strict=True)
    assert stage_adam.optimizer is not None and stage.optimizer is not None
    params, rest = divmod(stage_adam.optimizer.flops, 12)
    assert rest == 0 and params > 0
    flops, moved = STEP_PER_PARAM[kind]
    instr = stage.optimizer
    assert instr.name == f"optimizer.{kind}"
    assert instr.flops == flops * params
    assert instr.bytes_read + instr.bytes_written == moved * params
    (states_adam,), (states,) = memory_report(adam, False), memory_report(programs, False)
    assert states_adam.optimizer_bytes % 12 == 0
    assert states.optimizer_bytes == states_adam.optimizer_bytes // 12 * STATE_PER_PARAM[kind]
    backend = AnalyticalBackend(overrides={"optimizer": kind})
    evaluation = backend.evaluate(SMALL, parallel, system)
    traced = trace_step(backend, SMALL, parallel, system, record_nodes=True, gathers_ahead=False)
    (rank,) = traced.result.ranks
    (node,) = [i for i in traced.templates[0] if i.source is not None and i.source[1] == OPTIMIZER]
    assert node.node.flops == instr.flops  # the trace mode lowers the same node
    start, end = traced.result.node_times[(rank, node.node.id)]
    assert math.isclose(end - start, evaluation.breakdown["optimizer"], rel_tol=1e-9)
    if kind != "adam":  # the smaller state and step than Adam's
        default = AnalyticalBackend().evaluate(SMALL, parallel, system)
        assert evaluation.breakdown["optimizer"] < default.breakdown["optimizer"]
        assert evaluation.peak_memory_bytes < default.peak_memory_bytes

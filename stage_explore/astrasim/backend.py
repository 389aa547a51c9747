"""The ASTRA-sim backend: write the inputs, run an installed ASTRA-sim, read its result.

For one (model, parallel config, system) point, :class:`AstraSimBackend` lowers the pair to rank
programs, checks memory (:func:`~stage_core.lower.memory.memory_report`), writes the trace set
and ASTRA-sim's system, network and memory files from the same System the analytical backend
uses (:mod:`~stage_explore.astrasim.inputs`; a run this host's memory cannot hold is refused
before its traces are written, :mod:`~stage_explore.astrasim.memory`), runs the binary in a
scratch directory (:mod:`~stage_explore.astrasim.run`) and returns the same
:class:`Evaluation` as the analytical backend: step time = the slowest rank's finish (1 cycle =
1 ns); breakdown = that rank's GPU compute, exposed communication and the remainder; MFU/HFU
from the step's matmul and attention FLOPs (recompute excluded / included, as in the analytical
backend); tokens/s per GPU.

Out-of-memory points are not simulated unless ``simulate_infeasible`` is set: they come back
with ``feasible=False`` and NaN times. A run that does not complete raises
:class:`~stage_explore.astrasim.run.AstraSimError` (a failed trial). A binary that cannot be
found is a ConfigError from :meth:`AstraSimBackend.preflight`, and an AstraSimError (failed, not
infeasible) when met during an evaluation.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from stage_core.errors import ConfigError, InfeasibleError
from stage_core.lower.flops import step_flops
from stage_core.lower.memory import memory_report
from stage_core.lower.program import ProgramSet, lower, make_workload
from stage_core.models.spec import ModelSpec
from stage_core.parallel.config import ParallelConfig
from stage_explore.analytical.parts import compute_dtype, peak_dtype
from stage_explore.astrasim import memory
from stage_explore.astrasim.discovery import Variant, check_starts, find_binary, parse_variant
from stage_explore.astrasim.inputs import AstraInputs, AstraSettings, astra_config, write_inputs
from stage_explore.astrasim.memory import HostMemoryError
from stage_explore.astrasim.parse import AstraSimReport
from stage_explore.astrasim.run import AstraSimError, run_astra_sim
from stage_explore.evaluation import BaseBackend, Evaluation
from stage_explore.system.model import System

NS_PER_CYCLE = 1e-9


def _slug(model: ModelSpec, parallel: ParallelConfig) -> str:
    degrees = "-".join(
        f"{axis}{getattr(parallel, axis)}" for axis in ("dp", "tp", "cp", "pp", "ep")
        if getattr(parallel, axis) > 1
    )  # fmt: skip
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{model.name}-{degrees or 'single'}-")


class AstraSimBackend(BaseBackend):
    """Runs an installed ASTRA-sim analytical binary on STAGE's traces.

    Options (a study's ``[backend.options]``): ``binary`` (path or command; default
    ``ASTRA_SIM_BIN``, then ``PATH``), ``variant`` (``"unaware"`` | ``"aware"``), ``timeout_s``
    per run (``None``: no limit), ``keep_dir`` (keep every run's directory under it; default:
    a temporary directory, removed), ``simulate_infeasible`` (run out-of-memory points too), and
    the settings of :class:`~stage_explore.astrasim.inputs.AstraSettings` (system.json's, and
    ``compute``: ``"roofline"`` | ``"kernels"``, :mod:`~stage_explore.astrasim.kernel_times`).
    """

    name = "astra-sim"

    def __init__(
        self,
        binary: str | os.PathLike[str] | None = None,
        variant: str = "unaware",
        timeout_s: float | None = 3600.0,
        keep_dir: str | os.PathLike[str] | None = None,
        simulate_infeasible: bool = False,
        endpoint_delay_ns: int = 10,
        preferred_dataset_splits: int = 4,
        active_chunks_per_dimension: int = 1,
        collective_optimization: str = "localBWAware",
        scheduling_policy: str = "LIFO",
        compute: str = "roofline",
    ) -> None:
        self.binary = None if binary is None else os.fspath(binary)
        self.variant: Variant = parse_variant(variant)
        if timeout_s is not None and (
            isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float)
            or not math.isfinite(timeout_s) or timeout_s <= 0
        ):  # fmt: skip
            raise ConfigError(f"ASTRA-sim `timeout_s` must be a number > 0, but got {timeout_s!r}")
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        self.keep_dir = None if keep_dir is None else Path(keep_dir).expanduser().absolute()
        if not isinstance(simulate_infeasible, bool):
            raise ConfigError(
                "ASTRA-sim `simulate_infeasible` must be true or false, "
                f"but got {simulate_infeasible!r}"
            )
        self.simulate_infeasible = simulate_infeasible
        self.settings = AstraSettings(
            endpoint_delay_ns=endpoint_delay_ns,
            preferred_dataset_splits=preferred_dataset_splits,
            active_chunks_per_dimension=active_chunks_per_dimension,
            collective_optimization=collective_optimization,
            scheduling_policy=scheduling_policy,
            compute=compute,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "binary": self.binary,
            "variant": self.variant.value,
            "timeout_s": self.timeout_s,
            "keep_dir": None if self.keep_dir is None else str(self.keep_dir),
            "simulate_infeasible": self.simulate_infeasible,
            **self.settings.to_dict(),
        }

    def preflight(self) -> Path:
        """The binary this backend will run; a one-line ConfigError if there is none, or if
        the dynamic loader cannot start it (:func:`check_starts`)."""
        found = find_binary(self.binary, self.variant)
        check_starts(found)
        return found

    def check_network(self, system: System, gpus: int, dtype: str) -> None:
        """A one-line ConfigError when the chosen build cannot simulate the job's network.

        The congestion-aware build (ASTRA-sim 518bd51) accepts 1-D topologies only; it exits
        with ``only support 1-dim topology`` otherwise.
        """
        if self.variant is not Variant.AWARE:
            return
        dims = astra_config(system, num_gpus=gpus, dtype=dtype, settings=self.settings).dims
        if len(dims) > 1:
            sizes = " x ".join(str(dim.npus) for dim in dims)
            raise ConfigError(
                f"ASTRA-sim variant 'aware' (congestion-aware) simulates 1-D networks only, but "
                f"{gpus} GPUs on system {system.name!r} span {len(dims)} network dims ({sizes}); "
                "use variant 'unaware' or a system whose first dim holds every GPU"
            )

    def write_inputs(
        self, model: ModelSpec, parallel: ParallelConfig, system: System, directory: Path | str
    ) -> AstraInputs:
        """Every input file of the point's run, in ``directory`` (nothing is run)."""
        programs = lower(model, parallel)
        return write_inputs(
            programs, system, directory, dtype=compute_dtype(parallel, system),
            settings=self.settings,
        )  # fmt: skip

    # -- evaluation ---------------------------------------------------------------------------

    def evaluate(self, model: ModelSpec, parallel: ParallelConfig, system: System) -> Evaluation:
        workload = make_workload(model, parallel)
        gpus = workload.world_size
        if gpus > system.max_gpus:
            reason = f"{gpus} GPUs exceed the system's {system.max_gpus}"
            return self._infeasible(reason, gpus, system)
        try:
            programs = lower(model, parallel)
        except InfeasibleError as error:
            return self._infeasible(error.reason, gpus, system)
        peak_memory = max(breakdown.peak_bytes for breakdown in memory_report(programs, False))
        capacity = system.accelerator.memory_bytes
        feasible = peak_memory <= capacity
        reason = ""
        if not feasible:
            gib = 2**30
            reason = (
                f"out of memory: peak {peak_memory / gib:.2f} GiB exceeds {capacity / gib:.2f} GiB"
            )
        if not feasible and not self.simulate_infeasible:
            return self._infeasible(reason, gpus, system, peak_memory)
        self.check_network(system, gpus, compute_dtype(parallel, system))
        try:
            binary = find_binary(self.binary, self.variant)
        except ConfigError as error:  # on a worker: a failed trial, not an infeasible point
            raise AstraSimError(str(error)) from None
        report, extra = self._run(binary, programs, model, parallel, system)
        return self._result(programs, report, extra, peak_memory, feasible, reason, system)

    def _run(
        self,
        binary: Path,
        programs: ProgramSet,
        model: ModelSpec,
        parallel: ParallelConfig,
        system: System,
    ) -> tuple[AstraSimReport, dict[str, Any]]:
        dtype = compute_dtype(parallel, system)
        try:
            if self.keep_dir is not None:
                self.keep_dir.mkdir(parents=True, exist_ok=True)
            directory = Path(tempfile.mkdtemp(
                prefix=_slug(model, parallel) if self.keep_dir else "stage-astra-sim-",
                dir=self.keep_dir,
            )).absolute()  # fmt: skip
        except OSError as error:
            where = self.keep_dir or tempfile.gettempdir()
            raise AstraSimError(f"cannot create a run directory in {where}: {error}") from error
        try:
            inputs = write_inputs(
                programs, system, directory, dtype=dtype, settings=self.settings,
                available=memory.available_bytes,
            )  # fmt: skip
            run = run_astra_sim(binary, inputs, timeout_s=self.timeout_s)
        except HostMemoryError:
            if self.keep_dir is not None and not any(directory.glob("*.et")):
                shutil.rmtree(directory, ignore_errors=True)  # refused before writing: empty
            raise
        except AstraSimError as error:
            note = (
                f"inputs kept in {directory}"
                if self.keep_dir
                else ("set the backend option keep_dir to keep the inputs")
            )
            raise error.with_note(f"binary {binary}; {note}") from None
        finally:
            if self.keep_dir is None:
                shutil.rmtree(directory, ignore_errors=True)
        extra: dict[str, Any] = {
            "astra_sim_binary": str(binary),
            "astra_sim_variant": self.variant.value,
            "astra_sim_run_s": run.seconds,
            "slowest_rank": run.report.slowest.rank,
        }
        if self.keep_dir is not None:
            extra["astra_sim_dir"] = str(directory)
        if run.teardown_crash:
            extra["astra_sim_note"] = run.teardown_crash
        return run.report, extra

    def _result(
        self,
        programs: ProgramSet,
        report: AstraSimReport,
        extra: dict[str, Any],
        peak_memory: int,
        feasible: bool,
        reason: str,
        system: System,
    ) -> Evaluation:
        workload = programs.workload
        gpus = workload.world_size
        slowest = report.slowest
        step = slowest.finished_cycles * NS_PER_CYCLE
        compute = slowest.compute_cycles * NS_PER_CYCLE
        exposed = slowest.exposed_communication_cycles * NS_PER_CYCLE
        breakdown = {
            "compute": compute,
            "exposed_communication": exposed,
            "other": max(0.0, step - compute - exposed),
        }
        model_flops, hardware_flops = step_flops(programs)
        peak = system.accelerator.peak(
            peak_dtype(workload.parallel, compute_dtype(workload.parallel, system))
        )
        tokens = workload.tokens_per_step
        price = system.price_per_gpu_hour
        cost = None if price is None else price * gpus * step / 3600
        nan = float("nan")
        return Evaluation(
            step_time_s=step,
            mfu=model_flops / (step * gpus * peak) if step > 0 else nan,
            hfu=hardware_flops / (step * gpus * peak) if step > 0 else nan,
            tokens_per_s_per_gpu=tokens / step / gpus if step > 0 else nan,
            peak_memory_bytes=peak_memory,
            feasible=feasible,
            reason=reason,
            breakdown=breakdown,
            memory_capacity_bytes=system.accelerator.memory_bytes,
            num_gpus=gpus,
            model_flops_per_step=model_flops,
            hardware_flops_per_step=hardware_flops,
            cost_per_step=cost,
            cost_per_million_tokens=None if cost is None else cost / tokens * 1e6,
            backend=self.name,
            extra=extra,
        )

    def _infeasible(
        self, reason: str, gpus: int, system: System, peak_memory: int = 0
    ) -> Evaluation:
        nan = float("nan")
        return Evaluation(
            step_time_s=nan, mfu=nan, hfu=nan, tokens_per_s_per_gpu=nan,
            peak_memory_bytes=peak_memory, feasible=False, reason=reason,
            memory_capacity_bytes=system.accelerator.memory_bytes, num_gpus=gpus,
            backend=self.name,
        )  # fmt: skip

"""Serving steps as per-rank programs for the trace writers (Chakra, JSON, symmetric form).

A serving step becomes a :class:`~stage_core.lower.program.ProgramSet` whose stages run only
forward tasks and no step-level work (no gradient synchronisation, no optimizer): one
micro-batch of ``batch`` sequences without pipeline parallelism, and ``pp`` micro-batches in
flight with it — the steady state whose throughput the analytical model reports — each passing
its activations to the next stage with matched sends and receives.
"""

from __future__ import annotations

from dataclasses import replace

from stage_core.lower.program import Chunk, ProgramSet, StageProgram
from stage_core.lower.schedule import Task
from stage_core.models.spec import ModelSpec
from stage_core.serving.config import ServingConfig, ServingStep
from stage_core.serving.program import lower_step


def serving_program_set(
    model: ModelSpec, config: ServingConfig, step: ServingStep | None = None
) -> ProgramSet:
    """The per-stage programs of one serving step (the phase's last step by default: the
    whole prompt, its last chunk, or the decode step)."""
    chosen = step or config.steps()[-1]
    program = lower_step(model, config, chosen)
    in_flight = config.pp
    workload = replace(program.workload, micro_batches=in_flight)
    tasks = tuple(Task("F", 0, micro_batch) for micro_batch in range(in_flight))
    stages = tuple(
        StageProgram(
            stage.stage,
            (Chunk(0, stage.stage, stage.blocks, stage.layers),),
            tasks,
            (),
            None,
            program.boundary_bytes,
        )
        for stage in program.stages
    )
    return ProgramSet(workload, stages, program.blocks)

"""KempnerForge under pipeline parallelism, read from its code (7 Dec 2026, s36 kfpp): its
pipeline stage is an FSDP2 module resharded after each forward but left gathered after each
backward by torch pipelining (:func:`kempnerforge_pipeline_defaults`).

What its code runs (KempnerInstitute/KempnerForge 01b461a7, the commit its MFU report names,
a day before the config-validation report's 601aba9, which is not stored): ``scripts/train.py``,
with ``distributed.pp`` > 1, builds the stage with ``build_stage_module`` and calls
``apply_fsdp2(model, device_mesh, mp_policy=mp_policy)`` without ``reshard_after_forward``
(its default ``True``, ``kempnerforge/distributed/parallel.py``), which ``fully_shard``s every
block and the stage module itself; then
``build_pipeline_stage`` (``PipelineStage``) and ``build_pipeline_schedule`` (``Schedule1F1B``
for ``pp_schedule`` '1f1b', ``ScheduleGPipe`` for 'gpipe') with ``n_microbatches =
grad_accum_steps``; the step concatenates the ``grad_accum_steps`` micro-batches and
``schedule.step`` splits them (the model's ``m`` = global batch / (micro-batch x dp) is that
count). The PP path has no ``maybe_no_sync``. The ``pipeline_parallel.py`` docstring
recommends ``reshard_after_forward=False`` for PP, but KempnerForge's own
``docs/distributed/fsdp2.md`` (b405f41d) says it is "not currently wired through the training
script": PP runs default to ``True``. So it is not torchtitan's ``pp_unsharded_params``
(gathered once per step). What torch's pipelining adds: ``stage.py``
``backward_maybe_with_nosync`` (pytorch/pytorch 01386103; before the reduction moved out of
it, its last backward ran ``post_backward`` itself: the same hold until then), on a
submodule that is an ``FSDPModule``, calls ``set_reshard_after_backward(False)`` and
``set_requires_gradient_sync(False)`` before every backward, so each backward leaves the
stage's parameters gathered and its gradients unsharded (reduce-scattered once after the
last), and the next forward's ``post_forward`` reshards them: ``pp_backward_held_params``
(the memory of the held stage) with ``fsdp_no_sync_accumulation`` (its unsharded gradients,
set by :func:`~stage_explore.validation.infer_no_sync.no_sync_defaults`).

A compiled stage is left out: ``torch.compile(model)`` on that path returns an
``OptimizedModule``, which is not an ``FSDPModule`` (``isinstance`` sees the wrapper's class
until pytorch/pytorch PR #186294, June 2026, proposed proxying ``__class__`` to the wrapped
module), so ``backward_maybe_with_nosync`` takes its plain branch and FSDP2 reshards after
every backward. Which of the two a compiled run's torch did is not read here; the
``fsdp_no_sync_accumulation`` that ``no_sync_defaults`` sets for every KempnerForge row is
left as it is (docs/analytical.md, s36 kfpp).
"""

from __future__ import annotations

from typing import Any

from stage_explore.validation.infer_compile import names_compile
from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.infer_stated import names_kempnerforge, stated_or_inferred

KEMPNERFORGE_PP_NOTE = (
    "the pipeline stage held gathered after each backward (pp_backward_held_params): the row "
    "names KempnerForge at pp > 1, whose scripts/train.py (01b461a7) fully_shards the stage "
    "with apply_fsdp2's default reshard_after_forward=True and runs it in torch pipelining's "
    "PipelineStage / Schedule1F1B over grad_accum_steps micro-batches; torch's stage.py "
    "backward_maybe_with_nosync sets set_reshard_after_backward(False) and "
    "set_requires_gradient_sync(False) on the FSDPModule stage for its backwards, so the "
    "stage's whole 16-bit weights stay gathered from a backward to the next forward beside its "
    "unsharded gradients (the all-gathers stay timed per micro-batch)"
)


def kempnerforge_pipeline_defaults(
    row: dict[str, str], parallel: dict[str, Any], stated: dict[str, int], out: Defaults
) -> None:
    """``pp_backward_held_params`` for a ZeRO-3 row of the ``fsdp`` profile naming KempnerForge
    (:func:`names_kempnerforge`) with pp > 1 that does not
    say it was compiled (:func:`~stage_explore.validation.infer_compile.names_compile`;
    module docstring)."""
    if not names_kempnerforge(row):
        return
    pp = stated_or_inferred(stated, parallel, "pp")
    if pp <= 1 or int(parallel.get("zero", 0)) < 3 or names_compile(row):
        return
    out.options["pp_backward_held_params"] = True
    out.notes.append(KEMPNERFORGE_PP_NOTE)

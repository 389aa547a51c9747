"""Reader rule for trainers that accumulate FSDP gradients with sync off on every micro-batch
but the last (``fsdp_no_sync_accumulation``, :mod:`stage_explore.analytical.no_sync`): only
where a trainer's code does it by default (7 Dec 2026, s35 nosync).

KempnerForge's training loop runs every micro-step's forward and backward inside
``maybe_no_sync(model, micro_step, grad_accum_steps)`` (kempnerforge/training/grad.py,
KempnerInstitute/KempnerForge 0c4eba1e): on every micro-step but the last it calls
``model.set_requires_gradient_sync(False)`` on the FSDP2 module (``fully_shard``), restoring
it after, so FSDP2 keeps the unsharded gradients over the step and reduce-scatters them once.
The docs/validation.md section 'FSDP accumulation without per-micro-batch sync (s35 nosync)'
records which other trainers were read and what their code does.

NeMo AutoModel defers the sync by default (the ``automodel`` profile's option, from
``FSDP2Manager.defer_fsdp_grad_sync`` True), but the configs of its published dense pre-training
benchmarks turn it off (:func:`automodel_no_sync_defaults`; 7 Dec 2026, s37 fsdpsync).
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_release import TEXT_COLUMNS, Defaults, row_text
from stage_explore.validation.infer_stated import names_kempnerforge
from stage_explore.validation.infer_torch import FSDP2_COLUMNS, FSDP2_NAMED

KEMPNERFORGE_NO_SYNC = (
    "FSDP2 gradient sync off on every micro-batch but the last (fsdp_no_sync_accumulation): the "
    "text names KempnerForge, whose training loop wraps each micro-step in maybe_no_sync "
    "(kempnerforge/training/grad.py: model.set_requires_gradient_sync(False) unless it is the "
    "last micro-step), so each rank holds its unsharded gradients in the fp32 reduce dtype over "
    "the step and reduce-scatters once (torch _fully_shard/_fsdp_param.py "
    "to_accumulated_grad_if_needed)"
)

#: A row naming Hugging Face's ``Trainer`` (``HF Trainer``, ``Hugging Face Trainer``,
#: ``transformers Trainer``) or its ``run_clm.py`` example, which trains with it.
HF_TRAINER = re.compile(
    r"\brun_clm(?:\.py)?\b|(?:\bhf|hugging\s*face(?:'s)?|\btransformers(?:'s?)?)\s+trainer\b",
    re.IGNORECASE,
)
HF_TRAINER_NO_SYNC = (
    "FSDP1 no_sync() on every micro-batch but the last (fsdp_no_sync_accumulation): the text "
    "names Hugging Face's Trainer under FSDP (FSDP1, the profile's, not FSDP2), whose training "
    "loop runs each micro-batch but the last inside accelerator.no_sync(model) "
    "(transformers/trainer.py _inner_training_loop, unless DeepSpeed; before accelerate, "
    "model.no_sync() when args._no_sync_in_gradient_accumulation, which excludes only "
    "DeepSpeed and SageMaker), and accelerate's no_sync enters the FSDP module's no_sync() "
    "(accelerate/accelerator.py: getattr(model, 'no_sync')): the flat parameters' unsharded "
    "gradients accumulate in the parameter dtype over the step (torch FSDP1 "
    "_post_backward_hook returns before the reduce-scatter without _sync_gradients)"
)


#: A row reading as NeMo AutoModel's own published benchmark: its performance summary
#: (docs/performance-summary.md) or a ``*_pretrain_benchmark_*`` config of examples/llm_pretrain.
AUTOMODEL_BENCHMARK = re.compile(
    r"performance[\s_-]*summary|pretrain[\s_-]*benchmark", re.IGNORECASE
)
AUTOMODEL_DENSE_BENCHMARK_SYNC = (
    "FSDP2 reduce-scatters every micro-batch (fsdp_no_sync_accumulation off, over the "
    "automodel profile's deferred sync): the text names NeMo AutoModel's published "
    "benchmark for a dense model, and every dense pre-training benchmark config AutoModel "
    "publishes sets distributed.defer_fsdp_grad_sync: False (NVIDIA-NeMo/Automodel "
    "examples/llm_pretrain/llama3_1_70b_pretrain_benchmark_{8nodes_tp1cp2pp1, "
    "8nodes_tp1cp2pp1_0410, 8nodes_tp1cp2pp1_force_hf, 4nodes_tp1cp1pp1_0412, "
    "8nodes_tp1cp1pp1_0414, 8nodes_tp1cp1pp1_bf16_reduce_0422}.yaml: 'Must be False with "
    "GA>1: True -> delayed resharding -> OOM'); its MoE benchmark configs "
    "(examples/benchmark/configs/*_te_deepep.yaml) leave the default True"
)


def automodel_no_sync_defaults(row: dict[str, str], zero: int, dense: bool, out: Defaults) -> None:
    """``fsdp_no_sync_accumulation`` off for a NeMo AutoModel row of a dense model whose text
    names AutoModel's published benchmark (:data:`AUTOMODEL_BENCHMARK`): the benchmark's dense
    configs set ``defer_fsdp_grad_sync: False``; any other AutoModel row (its MoE benchmark
    tables, a recipe) keeps the profile's default, the library's ``defer_fsdp_grad_sync``
    True (``components/distributed/utils.py`` ``get_sync_ctx``: with it,
    ``set_requires_gradient_sync(is_optim_step)``; without it, ``True`` every micro-batch).
    With no gradient sharding (``zero`` < 2) there is nothing to defer."""
    if zero < 2 or not dense or not AUTOMODEL_BENCHMARK.search(row_text(row, TEXT_COLUMNS)):
        return
    out.options["fsdp_no_sync_accumulation"] = False
    out.notes.append(AUTOMODEL_DENSE_BENCHMARK_SYNC)


def no_sync_defaults(row: dict[str, str], zero: int, out: Defaults) -> None:
    """``fsdp_no_sync_accumulation`` for a ZeRO-3 (FSDP-sharded) row of the ``fsdp`` profile
    whose text names KempnerForge (:func:`names_kempnerforge`), or names Hugging Face's Trainer
    (:data:`HF_TRAINER`) and not FSDP2 (accelerate's ``no_sync`` enters FSDP2's
    ``set_requires_gradient_sync`` only from huggingface/accelerate PR #3762, September 2025:
    before it an FSDP2 module, which has no ``no_sync``, reduce-scattered every micro-batch;
    a row does not say which it ran, so it keeps the default). ZeRO-2 (``SHARD_GRAD_OP``)
    defers its reduce-scatters the same way (:mod:`stage_explore.analytical.no_sync`); with
    no gradient sharding (``zero`` < 2) there is no FSDP gradient to hold."""
    if zero < 2:
        return
    if names_kempnerforge(row):
        out.options["fsdp_no_sync_accumulation"] = True
        out.notes.append(KEMPNERFORGE_NO_SYNC)
        return
    text = row_text(row, FSDP2_COLUMNS)
    if HF_TRAINER.search(text) and not FSDP2_NAMED.search(text):
        out.options["fsdp_no_sync_accumulation"] = True
        out.notes.append(HF_TRAINER_NO_SYNC)

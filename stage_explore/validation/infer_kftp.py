"""KempnerForge's tensor-parallel mesh and plan, read from its code (7 Dec 2026, s36 kfmem): FSDP2
over a one-rank data-parallel mesh at dp 1 (:func:`one_rank_mesh_defaults`) and the token
embedding whole on every tensor-parallel rank (:func:`kempnerforge_embedding_defaults`)."""

from __future__ import annotations

from typing import Any

from stage_explore.validation.infer_release import Defaults
from stage_explore.validation.infer_stated import names_kempnerforge, stated_or_inferred

KEMPNERFORGE_ONE_RANK = (
    "FSDP2 over a one-rank data-parallel mesh (fsdp2_one_rank_mesh, with "
    "fsdp_no_sync_accumulation): the text names KempnerForge and the row runs tp > 1 at dp 1, "
    "where KempnerForge's init_distributed still puts a dp_shard dimension of size 1 in the "
    "DeviceMesh ('always include dp_shard when TP is active, even if dp_shard=1', "
    "kempnerforge/distributed/setup.py 01b461a7) and apply_fsdp2 wraps every block and the "
    "model over it (distributed/parallel.py); FSDP2 has no NO_SHARD fallback, so with sync off "
    "on every micro-step but the last (maybe_no_sync) each rank holds its whole gradient "
    "unsharded in the fp32 reduce dtype over the step (torch _fully_shard/_fsdp_param.py "
    "to_accumulated_grad_if_needed; _fsdp_collectives.py foreach_reduce copies at world size 1)"
)


KEMPNERFORGE_EMBEDDING_NOTE = (
    "the token embedding whole on every tensor-parallel rank (tp_embedding_replicated): "
    "KempnerForge's apply_tensor_parallel leaves token_embedding unparallelized ('RowwiseParallel "
    "on nn.Embedding doesn't correctly redistribute output to Shard(1)'; a forward hook wraps "
    "its output as a Replicate DTensor and the first block's SequenceParallel norm takes the "
    "rank's sequence chunk; kempnerforge/distributed/tensor_parallel.py 0c4eba1e): the V x H "
    "table is sharded over dp only, and the backward gathers the output's gradient over tp"
)


def kempnerforge_embedding_defaults(
    row: dict[str, str], parallel: dict[str, Any], stated: dict[str, int], out: Defaults
) -> None:
    """For a row of the ``fsdp`` profile naming KempnerForge (:func:`names_kempnerforge`) with
    tp > 1: ``tp_embedding_replicated`` (:data:`KEMPNERFORGE_EMBEDDING_NOTE`). KempnerForge's
    plan also leaves the embedding whole where it turns sequence parallelism off (pipeline
    stages, tied embeddings, MoE): there the table is never parallelized either."""
    if not names_kempnerforge(row):
        return
    if stated_or_inferred(stated, parallel, "tp") > 1:
        out.parallel["tp_embedding_replicated"] = True
        out.notes.append(KEMPNERFORGE_EMBEDDING_NOTE)


def one_rank_mesh_defaults(
    row: dict[str, str], parallel: dict[str, Any], stated: dict[str, int], out: Defaults
) -> None:
    """``fsdp2_one_rank_mesh`` and ``fsdp_no_sync_accumulation`` for a row naming KempnerForge
    (:func:`names_kempnerforge`) with tp > 1 and one data-parallel rank (dp·cp = 1, its ZeRO stage
    0): KempnerForge wraps the model in FSDP2 over a one-rank ``dp_shard`` mesh whenever
    tensor parallelism is on (:data:`KEMPNERFORGE_ONE_RANK`). With tp 1 at one rank there is
    no distributed mesh at all (``init_distributed`` returns ``None`` at world size 1) and no
    wrapper; at dp > 1 :func:`~stage_explore.validation.infer_no_sync.no_sync_defaults`
    applies."""
    if not names_kempnerforge(row):
        return
    tp, dp, cp = (stated_or_inferred(stated, parallel, axis) for axis in ("tp", "dp", "cp"))
    if tp <= 1 or dp * cp != 1:
        return
    out.options["fsdp2_one_rank_mesh"] = True
    out.options["fsdp_no_sync_accumulation"] = True
    out.notes.append(KEMPNERFORGE_ONE_RANK)

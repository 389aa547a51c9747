"""Which kind of peak a published memory figure is, read from the source's own wording.

A ``peak_mem_gib`` figure is one of three kinds
(:mod:`stage_explore.analytical.memory_kinds`): ``allocated``
(``torch.cuda.max_memory_allocated``), ``reserved`` (``torch.cuda.max_memory_reserved``, the
caching allocator's segments: torchtitan's logged ``max_reserved_gib``) or ``process`` (what
``nvidia-smi`` shows: the reserved segments, the CUDA context and NCCL's buffers). The row's
``source_table``, ``notes`` and ``uncertain`` cells say which when the source names the
counter; a row naming none is compared with the process peak (the whole process, what the
model reported for every row before s33 memkind).

Whose peak: a row whose text says the figure is rank 0's (:data:`RANK0_PHRASES`: a trainer
logging from rank 0 only, e.g. KempnerForge's ``_RankFilter(rank=0)``) is compared with
pipeline rank 0's peak (the global rank 0 of any device mesh has every coordinate 0), every
other row with the largest peak over the pipeline ranks (s37 memrows).
"""

from __future__ import annotations

from collections.abc import Mapping

from stage_core.errors import ConfigError

#: The kinds, and the phrases (lower case) that name each in a row's text: the PyTorch
#: counters' names and the wording sources print them under.
KIND_PHRASES: dict[str, tuple[str, ...]] = {
    "allocated": ("max_memory_allocated", "peak allocated", "memory_allocated peak"),
    "reserved": ("max_reserved", "max reserved", "max_memory_reserved", "memory_reserved"),
    "process": ("nvidia-smi", "nvml", "gpu memory usage"),
}

#: The phrases (lower case) saying the figure is the global rank 0's.
RANK0_PHRASES: tuple[str, ...] = ("of rank 0", "on rank 0", "logging rank is rank 0")

#: The kind of a row naming none: the process peak.
DEFAULT_KIND = "process"

#: The cells read.
KIND_COLUMNS = ("source_table", "notes", "uncertain")


def memory_kind(row: Mapping[str, str]) -> str:
    """The kind (a key of :data:`KIND_PHRASES`) of ``row``'s ``peak_mem_gib`` figure: the one
    kind whose phrases its :data:`KIND_COLUMNS` name, else :data:`DEFAULT_KIND`; a row naming
    two kinds is an error (its text must say which one the figure is)."""
    text = " ".join(str(row.get(column, "")) for column in KIND_COLUMNS).lower()
    named = [kind for kind, phrases in KIND_PHRASES.items() if any(p in text for p in phrases)]
    if len(named) > 1:
        raise ConfigError(
            f"row {row.get('id', '?')!r}: its text names the memory counters of {named}; "
            "expected one kind (allocated, reserved or process) for its peak_mem_gib"
        )
    return named[0] if named else DEFAULT_KIND


def memory_rank0(row: Mapping[str, str]) -> bool:
    """Whether ``row``'s text (:data:`KIND_COLUMNS`) says its ``peak_mem_gib`` figure is the
    global rank 0's (one of :data:`RANK0_PHRASES`)."""
    text = " ".join(str(row.get(column, "")) for column in KIND_COLUMNS).lower()
    return any(phrase in text for phrase in RANK0_PHRASES)


def kind_assumption(kind: str, rank0: bool = False) -> str:
    """The assumption line stating what a memory row is compared with (``rank0``: pipeline
    rank 0's peak, :func:`memory_rank0`)."""
    if kind not in KIND_PHRASES:
        raise ValueError(f"memory kind {kind!r}: expected one of {sorted(KIND_PHRASES)}")
    named = (
        "named by the row's text"
        if kind != DEFAULT_KIND
        else "the source names no counter: the whole process"
    )
    whose = " of pipeline rank 0" if rank0 else ""
    rank = "; the figure is rank 0's, as the row's text says" if rank0 else ""
    return (
        f"peak_mem_gib compared with the model's {kind} peak{whose} ({named}{rank}; "
        "stage_explore/analytical/memory_kinds.py)"
    )

"""Size limits checked before any work starts, so an absurd size is an error, not a long hang.

Contents:
    :data:`MAX_GPUS`, :data:`MAX_SEQ_LEN`, :data:`MAX_LAYERS`, :data:`MAX_GLOBAL_BATCH`
        the limits and why they are where they are.
    :func:`check_sizes`
        raise a one-line :class:`~stage_core.errors.ConfigError` naming the first size over
        its limit (study files, the command line's options).
    :func:`check_workload`
        the same for a model and parallel configuration, for every caller of the Python API
        (:func:`~stage_core.lower.program.make_workload`).

The limits are far above any training run published so far and within what the generator
handles in seconds to minutes on one core (measured with ``stage memory --model gpt3-1.3b``:
2^20 GPUs in about 16 s, 2^20 micro-batches in about 19 s and 0.6 GB on a shared 2-core
machine); past them the work grows without bound and no real cluster or model is near. Moved
from ``stage_explore.limits`` (s23 review: a Python caller's ``global_batch`` of 2^27 ran for
minutes where the command line refused it), which re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from stage_core.errors import ConfigError

if TYPE_CHECKING:
    from stage_core.models.spec import ModelSpec
    from stage_core.parallel.config import ParallelConfig

#: GPUs (dp·tp·cp·pp): 64× the 16,384 H100s of Llama 3 405B (Dubey et al. 2024, §3.3) and
#: above the 100,000-200,000-GPU clusters announced in 2024-2025.
MAX_GPUS = 1 << 20
#: Tokens per sequence: 2^24 ≈ 16.8 M, above the longest published context window
#: (10 M tokens, Llama 4 Scout, Meta 2025).
MAX_SEQ_LEN = 1 << 24
#: Transformer layers: 2^14 = 16,384, over 100× the deepest published LLMs (126 layers for
#: Llama 3 405B, 118 for PaLM 540B).
MAX_LAYERS = 1 << 14
#: Sequences per step: 2^20, 500× the 2,048 sequences of Llama 3 405B's 16 M-token batches;
#: it bounds the micro-batches a pipeline schedule enumerates.
MAX_GLOBAL_BATCH = 1 << 20

#: What each size is called in messages, unless the caller names it as the user wrote it.
_NAMES = {
    "gpus": "GPUs (dp·tp·cp·pp)",
    "seq_len": "sequence length",
    "layers": "layers",
    "global_batch": "global batch",
}
_LIMITS = {
    "gpus": (MAX_GPUS, "2^20"),
    "seq_len": (MAX_SEQ_LEN, "2^24 tokens"),
    "layers": (MAX_LAYERS, "2^14"),
    "global_batch": (MAX_GLOBAL_BATCH, "2^20 sequences"),
}


def check_sizes(
    sizes: Mapping[str, int | None], *, names: Mapping[str, str] | None = None, where: str = ""
) -> None:
    """Raise :class:`ConfigError` for the first size above its limit (``None`` = not given).

    ``sizes`` maps ``gpus``, ``seq_len``, ``layers`` and ``global_batch`` to values; ``names``
    says how the user wrote each (an option, a study key); ``where`` prefixes the message.
    """
    for key, value in sizes.items():
        limit, text = _LIMITS[key]
        if value is not None and value > limit:
            name = (names or {}).get(key, _NAMES[key])
            prefix = f"{where}: " if where else ""
            raise ConfigError(
                f"{prefix}{name}: expected at most {limit:,} ({text}, far beyond any "
                f"published training run), got {value:,}"
            )


def check_workload(model: ModelSpec, parallel: ParallelConfig) -> None:
    """The limits for a model and parallel configuration: a one-line :class:`ConfigError` for a
    size beyond them; run by :func:`~stage_core.lower.program.make_workload` (after checking the
    arguments' types) for every caller of the Python API."""
    gpus, batch = parallel.world_size, parallel.global_batch
    layers = model.layers + model.mtp_layers
    seq_len = model.seq_len if parallel.seq_len is None else parallel.seq_len
    within = gpus <= MAX_GPUS and seq_len <= MAX_SEQ_LEN and layers <= MAX_LAYERS
    if within and batch <= MAX_GLOBAL_BATCH:  # every evaluation: messages only when one is over
        return
    check_sizes(
        {"gpus": gpus, "seq_len": seq_len, "layers": layers, "global_batch": batch},
        names={
            "gpus": "GPUs (dp·tp·cp·pp)",
            "seq_len": "`seq_len`",
            "layers": f"model {model.name!r} `layers`"
            + (" + `mtp_layers`" if model.mtp_layers else ""),
            "global_batch": "`global_batch`",
        },
    )

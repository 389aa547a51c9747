"""Size limits checked before any work starts, so an absurd size is an error, not a long hang.

Contents:
    :data:`MAX_GPUS`, :data:`MAX_SEQ_LEN`, :data:`MAX_LAYERS`, :data:`MAX_GLOBAL_BATCH`,
    :data:`MAX_RANK_FILES`
        the limits and why they are where they are.
    :func:`check_sizes`
        raise a one-line :class:`~stage_core.errors.ConfigError` naming the first size over
        its limit (used by study files). The four size limits and this check live in
        :mod:`stage_core.limits` (s23 review: the Python API checks them too) and are
        re-exported here.
    :func:`check_options`, :func:`world_size_of`
        the same for the workload options of ``stage memory|trace|eval``.

The limits are far above any training run published so far and within what the generator
handles in seconds to minutes on one core (measured with ``stage memory --model gpt3-1.3b``:
2^20 GPUs in about 16 s, 2^20 micro-batches in about 19 s and 0.6 GB on a shared 2-core
machine); past them the work grows without bound and no real cluster or model is near.
"""

from __future__ import annotations

import argparse

from stage_core.limits import (
    MAX_GLOBAL_BATCH as MAX_GLOBAL_BATCH,
)
from stage_core.limits import (
    MAX_GPUS as MAX_GPUS,
)
from stage_core.limits import (
    MAX_LAYERS as MAX_LAYERS,
)
from stage_core.limits import (
    MAX_SEQ_LEN as MAX_SEQ_LEN,
)
from stage_core.limits import (
    check_sizes as check_sizes,
)

#: Ranks written one file each by ``stage trace --format chakra|json``: 2^17 = 131,072
#: (32,768 ranks take about 30 s); beyond, ``--format symmetric`` writes one program per class.
MAX_RANK_FILES = 1 << 17


def world_size_of(args: argparse.Namespace) -> int:
    """``--dp × --tp × --cp × --pp`` (``--ep`` is carved out of them; bad values count as 1,
    :class:`~stage_core.parallel.ParallelConfig` rejects them later with its own message)."""
    gpus = 1
    for name in ("dp", "tp", "cp", "pp"):
        gpus *= max(1, int(getattr(args, name, 1)))
    return gpus


def check_options(args: argparse.Namespace) -> None:
    """Check the sizes given as ``--dp --tp --cp --pp --seq-len --layers --global-batch``."""
    check_sizes(
        {
            "gpus": world_size_of(args),
            "seq_len": args.seq_len,
            "layers": args.layers,
            "global_batch": args.global_batch,
        },
        names={
            "gpus": "GPUs (--dp × --tp × --cp × --pp)",
            "seq_len": "--seq-len",
            "layers": "--layers",
            "global_batch": "--global-batch",
        },
    )

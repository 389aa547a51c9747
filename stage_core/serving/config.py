"""What an inference step is: :class:`ServingConfig` and the :class:`ServingStep` s of a phase.

A serving *instance* is ``dp·tp·pp`` GPUs holding one copy of the model: tensor parallelism
splits heads and FFN width, pipeline parallelism splits layers, ``dp`` runs attention
data-parallel (each dp rank owns ``batch/dp`` sequences and their KV cache), and experts are
partitioned over ``ep`` ranks carved out of ``dp`` (DeepSeek's serving layout: data-parallel
attention with expert-parallel MoE). ``batch`` counts the sequences of one step across the
instance; with ``pp > 1`` it is one micro-batch and ``pp`` of them are in flight.

- **prefill** runs each prompt's ``prompt_len`` tokens (in chunks of ``chunk`` tokens when
  ``chunk`` is set: one step per chunk, each attending to the cache of the chunks before it);
- **decode** generates one token per sequence over a cache of ``context_len`` tokens.

``two_batch_overlap`` runs each step as two micro-batches of half the sequences whose
communication overlaps the other's computation (DeepSeek's "dual micro-batch overlap" in its
inference system, SGLang's ``--enable-two-batch-overlap``); it needs an even number of sequences
per dp rank and is off by default, as in SGLang.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from stage_core.errors import ConfigError
from stage_core.limits import MAX_GLOBAL_BATCH

#: Largest context the generator accepts (2^24 tokens): beyond every model's position range.
MAX_CONTEXT = 1 << 24


class Phase(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


#: Bytes per element of the KV cache and of the weights, by precision name.
PRECISION_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True, slots=True)
class ServingStep:
    """One forward step: ``new_tokens`` per sequence, ``context`` cached tokens after it."""

    new_tokens: int
    context: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingConfig:
    """A prefill or decode step of one serving instance (module docstring)."""

    phase: Phase
    batch: int = 1
    prompt_len: int = 0
    context_len: int = 0
    chunk: int = 0
    kv_precision: str = "bf16"
    precision: str = "bf16"
    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    two_batch_overlap: bool = False

    def __post_init__(self) -> None:
        phase = self.phase
        if isinstance(phase, str) and phase in {p.value for p in Phase}:
            object.__setattr__(self, "phase", Phase(phase))
        else:
            raise ConfigError(f"`phase` must be 'prefill' or 'decode', but got phase={phase!r}")
        for name in ("batch", "dp", "tp", "pp", "ep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`{name}` must be a positive int, but got {name}={value!r}")
        if self.batch > MAX_GLOBAL_BATCH:  # the step's ParallelConfig would name global_batch
            raise ConfigError(
                f"`batch` must be at most {MAX_GLOBAL_BATCH:,} sequences (2^20, the size limit of "
                f"a step), but got batch={self.batch:,}"
            )
        for name in ("prompt_len", "context_len", "chunk"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= MAX_CONTEXT
            ):
                raise ConfigError(
                    f"`{name}` must be an int from 0 to {MAX_CONTEXT}, but got {name}={value!r}"
                )
        for name in ("kv_precision", "precision"):
            value = getattr(self, name)
            if value not in PRECISION_BYTES:
                raise ConfigError(
                    f"`{name}` must be one of {', '.join(map(repr, PRECISION_BYTES))}, "
                    f"but got {name}={value!r}"
                )
        if not isinstance(self.two_batch_overlap, bool):
            raise ConfigError(
                f"`two_batch_overlap` must be true or false, but got {self.two_batch_overlap!r}"
            )
        if self.phase == Phase.PREFILL and self.prompt_len < 1:
            raise ConfigError(f"prefill needs `prompt_len` ≥ 1, but got {self.prompt_len}")
        # s36 review9: a decode step's cache grows by one token, a prefill's by the prompt; the
        # decode bound said "must be below" after the range above had said "from 0 to" that
        # same number, and a prefill's cache + prompt was not bounded at all (2^25 tokens ran)
        if self.phase == Phase.DECODE and self.context_len + 1 > MAX_CONTEXT:
            raise ConfigError(
                f"a decode step's `context_len` must be at most {MAX_CONTEXT - 1} (the cache "
                f"plus the new token within {MAX_CONTEXT} = 2^24 tokens), but got "
                f"context_len={self.context_len}"
            )
        if self.phase == Phase.PREFILL and self.context_len + self.prompt_len > MAX_CONTEXT:
            raise ConfigError(
                f"a prefill's `context_len` + `prompt_len` (the cache after the step) must be at "
                f"most {MAX_CONTEXT} = 2^24 tokens, but got context_len={self.context_len} + "
                f"prompt_len={self.prompt_len}"
            )
        if self.batch % self.dp:
            raise ConfigError(
                f"`dp` must divide `batch` (each dp rank owns whole sequences), but got "
                f"(batch={self.batch}, dp={self.dp})"
            )
        if self.dp % self.ep:
            raise ConfigError(
                "experts are partitioned over ranks of the data-parallel attention: `ep` must "
                f"divide `dp`, but got (ep={self.ep}, dp={self.dp})"
            )

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def overlaps(self) -> bool:
        """Whether the step runs as two overlapped micro-batches (see the module docstring)."""
        return self.two_batch_overlap and (self.batch // self.dp) % 2 == 0

    @property
    def kv_bytes(self) -> int:
        return PRECISION_BYTES[self.kv_precision]

    @property
    def weight_bytes(self) -> int:
        return PRECISION_BYTES[self.precision]

    def steps(self) -> tuple[ServingStep, ...]:
        """The forward steps of this phase: one per prefill chunk (the whole prompt without
        chunking, on top of ``context_len`` already cached tokens), or one decode step."""
        if self.phase == Phase.DECODE:
            return (ServingStep(1, self.context_len + 1),)
        size = self.chunk or self.prompt_len
        result = []
        done = 0
        while done < self.prompt_len:
            new = min(size, self.prompt_len - done)
            done += new
            result.append(ServingStep(new, self.context_len + done))
        return tuple(result)

    def to_dict(self) -> dict[str, Any]:
        return {
            f.name: str(getattr(self, f.name)) if f.name == "phase" else getattr(self, f.name)
            for f in dataclasses.fields(self)
        }

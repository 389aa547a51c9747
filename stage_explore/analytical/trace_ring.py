"""Ring (P2P) context-parallel attention as the trace mode emits it: the block phase's ``ring``
instruction and the attention that waits for it, rewritten into the exchanges and attention
steps the framework runs (:func:`ring_program`).

The lowering writes a ring-attention phase as one ``ring`` instruction (``ring_steps`` key/value
messages to the next cp rank, :func:`stage_core.lower.bind._ring`) followed by the attention
that depends on it. The levelled mode times that pair as written, or, under Transformer
Engine's overlap (the profile's ``te_cp_overlap``), charges the ring only what the attention
steps do not hide (:func:`~stage_explore.analytical.te_context_parallel.te_ring_exposed_s`). The
trace runs the exchanges as point-to-point messages between the cp ranks and, under
``te_cp_overlap``, splits the attention into its ``cp`` steps, each ``1/cp`` of the
instruction's time (every step of the load-balanced causal ring does the same work on the
busiest rank, the levelled mode's ``step``), with the exchanges between them as
``AttnFuncWithCPAndKVP2P`` posts them (TE 2.x ``attention/dot_product_attention/
context_parallel.py``; ``AttnFuncWithCP`` in TE 1.x ``attention.py``):

- forward (and a recomputed one): step ``i`` waits for its keys and values (the message of
  step ``i − 1``), posts the message for step ``i + 1`` (forwarding what it received) and runs
  its attention; the first message is posted where the lowering puts the ring;
- backward: step ``i`` posts one exchange — the keys and values alone at the first step, the
  keys and values and the accumulated key/value gradients (two messages) at the middle ones,
  the gradients alone at the last — and runs its attention backward beside it; the next step
  waits for both; what reads the attention's gradients waits for the last exchange too.

Without ``te_cp_overlap`` the ring is emitted as written (its ``ring_steps`` messages one after
the other, the attention after the last). torch's ``context_parallel`` ring
(``cp_merge_fp32``) is not covered: the levelled mode re-charges its exchanges
(:func:`~stage_explore.analytical.context_parallel.cp_comm_timer`) by a structure the trace
does not emit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr


@dataclass(frozen=True, slots=True)
class RingProgram:
    """A phase's instructions as the trace emits them: ``instrs`` (dependencies renumbered),
    for each the index of the phase program's instruction it comes from (``origin``) and the
    share of that instruction's compute seconds it takes (``share``: ``1/cp`` for an attention
    step, 1 otherwise; a ring message's seconds are the point-to-point model's)."""

    instrs: tuple[Instr, ...]
    origin: tuple[int, ...]
    share: tuple[float, ...]


def _consumers(instrs: Sequence[Instr]) -> dict[int, int]:
    """Ring index → the attention that waits for it (each ring feeds one attention)."""
    found: dict[int, int] = {}
    for index, instr in enumerate(instrs):
        if instr.kind != "attention":
            continue
        for dep in instr.deps:
            if instrs[dep].kind == "ring" and instrs[dep].ring_steps > 0:
                if dep in found:
                    raise ConfigError(f"ring {instrs[dep].name!r} feeds two attentions")
                found[dep] = index
    return found


def ring_program(instrs: Sequence[Instr], cp: int, steps: bool) -> RingProgram:
    """``instrs`` with each ring and its attention as the trace runs them (module docstring):
    per step (``steps``: Transformer Engine's overlap) or as written."""
    if not steps or cp <= 1 or not any(i.kind == "ring" for i in instrs):
        return RingProgram(tuple(instrs), tuple(range(len(instrs))), (1.0,) * len(instrs))
    rings = _consumers(instrs)
    attended = {attention: ring for ring, attention in rings.items()}
    out: list[Instr] = []
    origin: list[int] = []
    share: list[float] = []
    done: dict[int, tuple[int, ...]] = {}  # old index → the new indices that complete it
    first_exchange: dict[int, int] = {}  # ring → the new index of its first exchange

    def emit(instr: Instr, old: int, fraction: float = 1.0) -> int:
        out.append(instr)
        origin.append(old)
        share.append(fraction)
        return len(out) - 1

    def mapped(deps: Sequence[int]) -> tuple[int, ...]:
        return tuple(dict.fromkeys(new for d in deps for new in done[d]))

    for index, instr in enumerate(instrs):
        if index in rings:  # the first exchange where the lowering puts the ring
            message = replace(instr, name=f"{instr.name}.x0", deps=mapped(instr.deps), ring_steps=1)
            first_exchange[index] = emit(message, index)
            done[index] = (first_exchange[index],)
            continue
        ring = attended.get(index)
        if ring is None:
            done[index] = (emit(replace(instr, deps=mapped(instr.deps)), index),)
            continue
        forward = instrs[ring].phase in ("fwd", "recompute")
        expected = (cp - 1) * (1 if forward else 2)
        if instrs[ring].ring_steps != expected:
            raise ConfigError(
                f"ring {instrs[ring].name!r}: {instrs[ring].ring_steps} messages, "
                f"not the {expected} of a {cp}-rank ring"
            )
        first = first_exchange[ring]
        done[index] = _steps(instrs, ring, index, cp, forward, first, mapped, emit)
    return RingProgram(tuple(out), tuple(origin), tuple(share))


def _steps(
    instrs: Sequence[Instr],
    ring: int,
    attention: int,
    cp: int,
    forward: bool,
    first: int,
    mapped: Callable[[Sequence[int]], tuple[int, ...]],
    emit: Callable[[Instr, int, float], int],
) -> tuple[int, ...]:
    """Emit the attention's ``cp`` steps and the ring's later exchanges (``first``: the new
    index of its first exchange, the message of step 1); the new indices that complete the
    attention."""
    message, instr = instrs[ring], instrs[attention]
    local = mapped(tuple(d for d in instr.deps if d != ring))  # its own queries, keys, values
    part = replace(
        instr,
        flops=instr.flops // cp,
        bytes_read=instr.bytes_read // cp,
        bytes_written=instr.bytes_written // cp,
    )

    def exchange(i: int, deps: tuple[int, ...], count: int) -> int:
        posted = replace(message, name=f"{message.name}.x{i}", deps=deps, ring_steps=count)
        return emit(posted, ring, 1.0)

    last = first  # the exchange the next step waits for
    step = emit(replace(part, name=f"{instr.name}.step0", deps=local), attention, 1.0 / cp)
    for i in range(1, cp):
        if forward:  # step i waits for its keys and values, posts step i + 1's, runs
            deps = (step, last)
            if i <= cp - 2:
                last = exchange(i, (last,), 1)
        else:  # step i waits for the exchange and the step before, posts its own, runs
            deps = (last, step)
            last = exchange(i, deps, 2 if i <= cp - 2 else 1)  # keys/values and gradients
        step = emit(replace(part, name=f"{instr.name}.step{i}", deps=deps), attention, 1.0 / cp)
    return (step,) if forward else (step, last)

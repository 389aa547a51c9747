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
the other, the attention after the last).

torch's ``context_parallel`` (the profile's ``cp_merge_fp32``, the lowering's key/value
all-gathers and gradient reduce-scatters over cp; :mod:`~stage_explore.analytical.
context_parallel`) is emitted as ``_templated_ring_attention`` and its backward run it
(:func:`torch_ring_program`): the attention as its ``cp`` SDPA calls, ``1/cp`` each; the
all-gather rotater's gathers (keys and values repeated to the query heads) where the lowering
puts them, the first (local) chunk not waiting for them, every later one does; in the backward,
after each chunk's SDPA backward the rank's fp32 key/value-gradient accumulators go to the next
cp rank (``dkv_rotater``, one message), posted once the previous rank's have been received and
added, and the chunk after the next waits for that receive too (the compute stream waits for
the message before the add); the last message returns the gradients to their owner, and what
read the reduce-scatters waits for it. Compiled (``cp_traced_ring`` on a compiled run), every
collective is waited for where it is issued: the first chunk waits for the gathers and every
chunk for the message before it. The levelled mode charges what this leaves exposed
(:func:`~stage_explore.analytical.context_parallel.cp_comm_timer`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from stage_core.errors import ConfigError
from stage_core.lower.bind import Instr
from stage_explore.analytical.context_parallel import (
    is_cp_gather,
    is_cp_scatter,
    repeated_gather,
    ring_message_sizes,
)


@dataclass(frozen=True, slots=True)
class RingProgram:
    """A phase's instructions as the trace emits them: ``instrs`` (dependencies renumbered),
    for each the index of the phase program's instruction it comes from (``origin``) and the
    share of that instruction's compute seconds it takes (``share``: ``1/cp`` for an attention
    step, 1 otherwise; a ring message's seconds are the point-to-point model's)."""

    instrs: tuple[Instr, ...]
    origin: tuple[int, ...]
    share: tuple[float, ...]
    #: Emitted collectives timed on their own bytes by the phase's collective timer before any
    #: ring charge (``PhaseProgram.base_comm_s``): torch's gathers of repeated keys and values.
    own: frozenset[int] = frozenset()


@dataclass(slots=True)
class _Rewrite:
    """A phase program being rewritten: the emitted instructions with their origins and
    shares, and for each original instruction the new ones that complete it (``done``)."""

    out: list[Instr] = field(default_factory=list)
    origin: list[int] = field(default_factory=list)
    share: list[float] = field(default_factory=list)
    done: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def emit(self, instr: Instr, old: int, fraction: float = 1.0) -> int:
        """Append ``instr`` (from original ``old``, ``fraction`` of its seconds); its index."""
        self.out.append(instr)
        self.origin.append(old)
        self.share.append(fraction)
        return len(self.out) - 1

    def mapped(self, deps: Sequence[int]) -> tuple[int, ...]:
        """Original dependencies ``deps`` as the new instructions that complete them."""
        return tuple(dict.fromkeys(new for d in deps for new in self.done[d]))

    def program(self, own: frozenset[int] = frozenset()) -> RingProgram:
        return RingProgram(tuple(self.out), tuple(self.origin), tuple(self.share), own)


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
    rewrite = _Rewrite()
    done, emit, mapped = rewrite.done, rewrite.emit, rewrite.mapped
    first_exchange: dict[int, int] = {}  # ring → the new index of its first exchange

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
    return rewrite.program()


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


def _torch_parts(
    instrs: Sequence[Instr],
) -> tuple[dict[int, tuple[int, ...]], dict[int, list[int]]]:
    """Each attention's key/value all-gathers over cp (its dependencies) and the gradient
    reduce-scatters over cp that read it; a cp collective of neither in a phase with an
    attention, or of two attentions, or two such attentions in one phase (the levelled charge
    is per phase) is a ConfigError. In a phase without an attention instruction (an unfused
    attention's einsums) the collectives stay as written, as the levelled mode times them."""
    gathers: dict[int, tuple[int, ...]] = {}
    scatters: dict[int, list[int]] = {}
    owner: dict[int, int] = {}
    for index, instr in enumerate(instrs):
        if instr.kind == "attention":
            gathers[index] = tuple(d for d in instr.deps if is_cp_gather(instrs[d]))
            for dep in gathers[index]:
                if owner.setdefault(dep, index) != index:
                    raise ConfigError(f"gather {instrs[dep].name!r} feeds two attentions")
        elif is_cp_scatter(instr):
            readers = [d for d in instr.deps if instrs[d].kind == "attention"]
            if len(readers) > 1:
                raise ConfigError(f"scatter {instr.name!r} reads {len(readers)} attentions")
            if readers:
                scatters.setdefault(readers[0], []).append(index)
                owner[index] = readers[0]
    attended = {i.phase for i in instrs if i.kind == "attention"}
    for index, instr in enumerate(instrs):  # a phase without an attention kernel: as written
        cp_collective = is_cp_gather(instr) or is_cp_scatter(instr)
        if cp_collective and index not in owner and instr.phase in attended:
            raise ConfigError(f"cp collective {instr.name!r} belongs to no attention")
    phases = [instrs[a].phase for a in gathers if gathers[a] or a in scatters]
    if len(phases) != len(set(phases)):
        raise ConfigError("two context-parallel attentions in one phase")
    return gathers, scatters


def torch_ring_program(instrs: Sequence[Instr], cp: int, traced: bool) -> RingProgram:
    """``instrs`` with each attention and its key/value all-gathers and gradient
    reduce-scatters over cp as torch's ``context_parallel`` runs them (module docstring);
    ``traced``: compiled, every collective waited for where it is issued. A message is a
    ``ring`` instruction of one step carrying the rank's fp32 key/value gradients
    (:func:`~stage_explore.analytical.context_parallel.ring_message_sizes`)."""
    if cp <= 1:
        return RingProgram(tuple(instrs), tuple(range(len(instrs))), (1.0,) * len(instrs))
    gathers, scatters = _torch_parts(instrs)
    gathered = {g: a for a, found in gathers.items() for g in found}
    scattered = {g: a for a, found in scatters.items() for g in found}
    rewrite = _Rewrite()
    done, emit, mapped = rewrite.done, rewrite.emit, rewrite.mapped
    own: set[int] = set()
    returned: dict[int, int] = {}  # attention → the receive of its ring's last message

    for index, instr in enumerate(instrs):
        if index in gathered:  # the rotater's gather, of the repeated keys or values
            gather = repeated_gather(instr, instrs[gathered[index]], cp)
            done[index] = (emit(replace(gather, deps=mapped(instr.deps)), index),)
            own.add(done[index][0])
        elif index in scattered:  # the gradients return with the ring's last message
            done[index] = (returned[scattered[index]],)
        elif index in gathers and (gathers[index] or index in scatters):
            done[index], last = _torch_steps(
                instrs, index, gathers[index], scatters.get(index, []), cp, traced, mapped, emit
            )
            if last is not None:
                returned[index] = last
        else:
            done[index] = (emit(replace(instr, deps=mapped(instr.deps)), index),)
    return rewrite.program(frozenset(own))


def _torch_steps(
    instrs: Sequence[Instr],
    attention: int,
    gathers: tuple[int, ...],
    scatters: list[int],
    cp: int,
    traced: bool,
    mapped: Callable[[Sequence[int]], tuple[int, ...]],
    emit: Callable[[Instr, int, float], int],
) -> tuple[tuple[int, ...], int | None]:
    """Emit an attention's ``cp`` SDPA calls and, in the backward (``scatters``), its gradient
    ring's ``cp`` messages; the new indices that complete the attention and the receive of the
    last message (None without a ring)."""
    instr = instrs[attention]
    got = mapped(gathers)  # the gathered keys and values
    local = mapped(tuple(d for d in instr.deps if d not in gathers))
    part = replace(
        instr,
        flops=instr.flops // cp,
        bytes_read=instr.bytes_read // cp,
        bytes_written=instr.bytes_written // cp,
    )

    def step(i: int, deps: tuple[int, ...]) -> int:
        return emit(replace(part, name=f"{instr.name}.step{i}", deps=deps), attention, 1.0 / cp)

    current = step(0, local + got if traced else local)
    if not scatters:  # forward or recomputed: the later chunks read the gathered ones
        for i in range(1, cp):
            current = step(i, (current, *got))
        return (current,), None
    sizes = ring_message_sizes([instrs[s] for s in scatters], instr, cp)
    message = Instr(
        f"dkv_ring:{instr.name}", instr.phase, "ring", axes=("cp",), comm_bytes=sum(sizes),
        ring_steps=1,
    )  # fmt: skip
    received: tuple[int, ...] = ()  # the previous message's receive
    waited: tuple[int, ...] = ()  # the receive the next chunk waits for
    sent = -1
    for i in range(cp):
        if i:
            current = step(i, (current, *got, *waited))
        before = received
        posted = replace(message, name=f"{message.name}.x{i}", deps=(current, *received))
        sent = emit(posted, scatters[0], 1.0)
        received = (sent,)
        waited = received if traced else before
    return (current,), sent

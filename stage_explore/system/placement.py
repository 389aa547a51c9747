"""Whether a design point's ranks fill the scale-up domains evenly: a one-line placement note.

Ranks are placed in rank order, ``dim_sizes[0]`` to a scale-up domain (an NVLink node or rack,
:mod:`~stage_explore.system.model`). Two layouts are timed on a placement the user may not
expect, and were accepted without a word until the s23 review:

- a *partly used domain*: more GPUs than one domain holds, but not a whole number of domains
  (16 GPUs on 3-GPU nodes: five full nodes and one GPU; 128 on NVL72 racks: 72 + 56);
- *groups that straddle domains unevenly*: the ranks of the innermost mesh axes, taken
  together, neither fill a whole number of domains nor divide one (TP 16 in 72-GPU racks:
  ranks 64–79 span two racks while 0–15 do not), so groups over the same axes span different
  domains.

The analytical backend times each pipeline stage by the groups of its first rank
(``costing_comm._spans``; docs/analytical.md, "All-to-all on such a group"), so with uneven
groups a stage whose other groups straddle is timed by one that may not. Timing every stage by
its slowest group was tried and not landed (it moves published rows, same section); the point
stays valid and is evaluated, and the note says so: :func:`placement_note`, which the backend
puts in ``Evaluation.extra["placement"]`` and ``stage eval`` prints as a warning.

The serving evaluations (prefill, decode, serve, and the design points of inference studies)
time each pipeline stage by its first rank's groups too (``serving._timers``) and carry the
same note for one instance's mesh (:func:`placement_extra`); ``evaluate_serve`` carries the
decode pool's note and, when it differs, the prefill pool's. The ASTRA-sim backend simulates
every rank's groups on the network it is given, so the straddling half does not apply; a partly
used domain it cannot simulate at all (its network's NPU count must equal the trace's ranks),
and it is refused before the run (:mod:`~stage_explore.astrasim.inputs`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from stage_core.mesh import Mesh
from stage_explore.system.model import System
from stage_explore.wording import counted

#: The ``Evaluation.extra`` key of the note.
PLACEMENT_KEY = "placement"


def placement_note(system: System, axes: Sequence[tuple[str, int]]) -> str | None:
    """The placement note of ranks over mesh ``axes`` (``(name, size)``, outermost first, rank
    order as :class:`~stage_core.mesh.Mesh`) on ``system``, or None when one domain holds them
    all, or every domain in use is full and every innermost group of axes fits the domains
    evenly (a system of one network dim is one domain)."""
    if len(system.network) < 2:
        return None
    first = system.network[0]
    return _note(first.size, first.name, tuple(axes))


def placement_extra(system: System, mesh: Mesh) -> dict[str, str]:
    """``{"placement": note}`` for ranks over ``mesh`` (a :class:`~stage_core.mesh.Mesh`) on
    ``system`` when :func:`placement_note` gives one, else ``{}``: the entry an evaluation's
    ``extra`` carries."""
    note = placement_note(system, tuple((axis.name, int(axis.size)) for axis in mesh.axes))
    return {} if note is None else {PLACEMENT_KEY: note}


@functools.lru_cache(maxsize=1024)
def _note(domain: int, domain_name: str, axes: tuple[tuple[str, int], ...]) -> str | None:
    world = 1
    for _, size in axes:
        world *= size
    if domain <= 1 or world <= domain:
        return None
    kind = f"{domain_name!r} domain" if domain_name else "domain"
    problems: list[str] = []
    if world % domain:
        full, rest = divmod(world, domain)
        problems.append(
            f"{world} GPUs fill {counted(full, kind)} of {domain} GPUs and "
            f"{counted(rest, 'GPU')} of another"
        )
    inner: list[str] = []
    ranks = 1
    for name, size in reversed(axes):
        if size == 1:
            continue
        inner.append(name)
        ranks *= size
        if ranks < world and ranks % domain and domain % ranks:
            problems.append(
                f"{'·'.join(reversed(inner))} groups of {ranks} ranks neither fill nor divide "
                f"a domain of {domain} GPUs, so some straddle two domains and others do not (each "
                "pipeline stage is timed by its first rank's groups)"
            )
            break
    if not problems:
        return None
    return "placement: " + "; ".join(problems)

"""Resuming an adaptive search exactly where it stopped, by replaying its proposals.

Contents:
    :func:`replay`
        ask a fresh search again, with the counts the driver asked, answering each proposal
        from the records; the proposals of the last generation not yet told are handed back
        to the driver, which tells them in proposal order (evaluating the unrecorded ones).
    :func:`as_recorded`
        a study definition's ``[space]`` as a study recorded before its later knobs stored it
        (the check that a resumed study is unchanged).

Adding the records to a fresh search as finished trials (``add_finished``) gives the sampler
the same history but not the same state: TPE's and NSGA-II's random generators, the seeded
generator of unseen points, the generation boundaries and TPE's history rebuilds all start
anew, so the resumed run proposes other points than an uninterrupted one would (s31 review4:
the GPT-3 175B TPE study interrupted after 26 trials recorded 1,867 trials, 24 more
structurally impossible points than the uninterrupted run's 1,843). A search is deterministic
given its seed and the verdicts told to it in proposal order, which is the order the driver
tells them (:mod:`~stage_explore.search.driver`), so asking it again and telling it the
recorded verdicts brings it to the state the interrupted run had.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from stage_explore.records import Outcome
from stage_explore.search.outcomes import Verdict
from stage_explore.search.samplers import BaseSearch, GridSearch, Proposal
from stage_explore.study.space import KNOB_DEFAULTS

#: Unrecorded proposals a non-adaptive replay may hold, per record, before it gives up (the
#: driver holds at most eight windows of proposals, see its ``room``).
_QUEUED_PER_WINDOW = 8


def replay(
    search: BaseSearch,
    recorded: Mapping[tuple[Any, ...], Outcome],
    answer: Callable[[Outcome], Verdict],
    *,
    budget: int | None,
    window: int,
) -> list[Proposal] | None:
    """Replay ``search`` over the ``recorded`` outcomes (canonical key → outcome).

    Each proposal is told ``answer(outcome)`` in proposal order until the first proposal with
    no record (a trial running when the study stopped); from there on the proposals are
    returned, in order, for the driver to tell, the recorded ones marked ``recorded``.
    Returns ``None`` when the records do not follow the search's proposals (another seed, a
    smaller budget before, a study recorded by an older STAGE): the caller then adds them as
    finished trials to a fresh search instead. A grid search needs no replay (it proposes
    every point not seen, in a fixed order): ``None`` too.
    """
    if isinstance(search, GridSearch) or not recorded:
        return None
    remaining = dict(recorded)
    pending: list[Proposal] = []
    distinct = 0
    limit = len(recorded) + _QUEUED_PER_WINDOW * window
    while remaining:
        left = math.inf if budget is None else budget - distinct
        if left <= 0 or search.exhausted or len(pending) > limit:
            return None
        wanted = search.generation if search.generation is not None else len(remaining)
        proposals = search.propose(int(min(wanted, left)))
        if not proposals:
            return None
        for proposal in proposals:
            if not proposal.repeat:
                distinct += 1
            outcome = remaining.pop(proposal.key, None) if not proposal.repeat else None
            if pending or (outcome is None and not proposal.repeat):
                mark = outcome is not None
                pending.append(dataclasses.replace(proposal, recorded=mark) if mark else proposal)
                continue
            search.tell(proposal, answer(recorded[proposal.key] if outcome is None else outcome))
        if pending and remaining and search.generation is not None:
            return None  # an adaptive search told every earlier generation whole
    return pending


def as_recorded(space: dict[str, Any], stored: Any) -> dict[str, Any]:
    """``space`` (a fingerprint's ``[space]``) without the knobs a study recorded before they
    existed does not list, when they hold only their default (:data:`~stage_explore.study.space
    .KNOB_DEFAULTS`): such a study ran them at that value, so a resume matches it (s18: the
    ``precision`` and ``fp8_recipe`` knobs joined every training study's space)."""
    knobs = space.get("knobs")
    recorded = stored.get("knobs") if isinstance(stored, dict) else None
    if not isinstance(knobs, dict) or not isinstance(recorded, dict):
        return space
    kept = {
        name: values
        for name, values in knobs.items()
        if name in recorded or values != [KNOB_DEFAULTS.get(name, _NO_DEFAULT)]
    }
    return {**space, "knobs": kept}


#: A value no knob's default equals (a knob without a default is always compared).
_NO_DEFAULT = object()


__all__ = ["as_recorded", "replay"]

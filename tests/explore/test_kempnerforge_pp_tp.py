"""KempnerForge's pipeline stages run tensor parallelism without sequence parallelism: its
``apply_tensor_parallel`` sets ``seq_parallel = not is_pp_stage and not tie``
(kempnerforge/distributed/tensor_parallel.py c29a0d65, 0c4eba1e), so on a PP row every block's
checkpointed input is the whole [micro-batch, sequence, hidden] activation on each tensor-parallel
rank, not its 1/tp sequence shard (7 Dec 2026, s37 kfstage0)."""

from __future__ import annotations

from dataclasses import replace

from stage_explore.analytical.memory_kinds import RANK0_PREFIX
from stage_explore.validation.run import analytical_factory
from stage_explore.validation.setup_systems import case_system
from stage_explore.validation.setups import Case
from tests.explore.package_cases import package_cases

PP_ROW = "KFCFG-H200-13B-TP4-PP2-FSDP4-32"
NO_PP_ROW = "KFCFG-H200-7B-TP4-FSDP3-12"


def _cases() -> dict[str, Case]:
    return {c.id: c for c in package_cases() if c.metric == "peak_mem_gib"}


def test_the_kempnerforge_pp_rows_run_tensor_parallelism_without_sequence_parallelism() -> None:
    cases = _cases()
    pp_rows = [
        c
        for c in cases.values()
        if c.id.startswith("KF") and c.parallel is not None and c.parallel.pp > 1 < c.parallel.tp
    ]
    assert len(pp_rows) == 3
    for case in pp_rows:
        assert case.parallel is not None and case.parallel.sp is False
        options = dict(case.framework_options)
        assert "funcol_seq_copies" not in options  # no sequence-parallel collectives to copy
    no_pp = cases[NO_PP_ROW].parallel
    assert no_pp is not None and no_pp.sp is True  # without PP its plan keeps SP


def test_without_sequence_parallelism_stage_0_holds_whole_checkpointed_inputs() -> None:
    """The 13B row's stage 0 (20 layers, micro-batch 4 x 4,096 tokens, hidden 5,120, tp 4, two
    micro-batches in flight under 1F1B at pp 2): each layer's saved input is whole, not a 1/4
    sequence shard, so the rank-0 peak rises by at least 3/4 of 2 x 20 bf16 activations."""
    case = _cases()[PP_ROW]
    assert case.model is not None and case.parallel is not None
    system = case_system(case)
    backend = analytical_factory()(case.backend_key)
    key = f"{RANK0_PREFIX}peak_allocated_bytes"
    without_sp = backend.evaluate(case.model, case.parallel, system).extra[key]
    with_sp = backend.evaluate(case.model, replace(case.parallel, sp=True), system).extra[key]
    activation = 4 * 4096 * 5120 * 2  # bytes of one layer's whole input, one micro-batch
    assert without_sp - with_sp >= 0.75 * 2 * 20 * activation * 0.95

"""NVIDIA's MLPerf Training implementations of an inferred setup
(:mod:`stage_explore.validation.infer_megatron` calls them for a ``megatron-core`` row): the GPT-3
175B implementation on NeMo 1.x named by its round (:func:`mlperf_gpt3_round`, its settings in
:func:`mlperf_gpt3`) and the NeMo 2.0 implementation named without a container
(:func:`mlperf_nemo2_implementation`). Every setting is cited where it is set, read in the
submissions' code (mlcommons training_results), never chosen from a published row.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_mlperf_round import mlperf_training_round
from stage_explore.validation.infer_release import Defaults, row_text


def cell(row: dict[str, str], column: str) -> int:
    """An integer cell of the row (0 when empty or not a number)."""
    text = row.get(column, "").strip()
    return int(text) if text.isdigit() else 0


#: The first container of the MLPerf submissions on NeMo 2.0 (the v5.0 Llama 3.1 405B
#: pretrain.py on ngc25.01); NVIDIA's GPT-3 175B submissions before it run NeMo 1.x's
#: megatron_gpt_pretraining with the implementation's own conf/ (custom.yaml, optim/, tp_overlap/).
MLPERF_NEMO2 = (25, 1)
#: NVIDIA's NeMo implementation named in a row's text (the round: :func:`mlperf_training_round`).
_NVIDIA_NEMO_IMPLEMENTATION = re.compile(
    r"nvidia(?:'s)?\s+nemo\b[^;()]*?\bimplementation", re.IGNORECASE
)
#: The first MLPerf Training round whose NVIDIA NeMo implementations are NeMo 2.0 ones
#: (v5.0: llama31_405b; v5.1: llama31_8b / llama31_405b, pretrain.py on nemo.lightning).
MLPERF_NEMO2_ROUND = (5, 0)


def mlperf_nemo2_implementation(row: dict[str, str]) -> str:
    """Why a row that names no container runs NVIDIA's MLPerf implementation on NeMo 2.0, else
    "": its text names MLPerf Training v5.0 or later and NVIDIA's NeMo implementation (another
    submitter's copy of it, e.g. on its own image). That implementation is the same code
    whatever the image: mlcommons/training_results_v5.1 4da2d1cd
    {NVIDIA,Cisco}/benchmarks/llama31_8b/implementations/nemo pretrain.py builds NeMo 2.0's
    MegatronStrategy with DistributedDataParallelConfig(grad_reduce_in_fp32=False,
    fp8_param_gather=optim.fp8_params) and MegatronMixedPrecision(grad_reduce_in_fp32=False,
    fp8_params=...), and config_common.sh exports FP8_PARAMS=True (custom.yaml optim.fp8_params),
    so its setup is that of :data:`MLPERF_NEMO2`'s container path."""
    text = row_text(row)
    found = mlperf_training_round(text)
    if found is None or found < MLPERF_NEMO2_ROUND:
        return ""
    if not _NVIDIA_NEMO_IMPLEMENTATION.search(text):
        return ""
    return (
        f"the text names NVIDIA's NeMo implementation of MLPerf Training "
        f"v{found[0]}.{found[1]} and no container: NeMo 2.0's pretrain.py "
        "(mlcommons/training_results_v5.1 4da2d1cd llama31_8b/implementations/nemo: "
        "grad_reduce_in_fp32=False, fp8_param_gather from config_common.sh FP8_PARAMS=True), "
        "read as the MLPerf NeMo 2.0 container path"
    )


#: The container of NVIDIA's MLPerf Training v4.0 GPT-3 submissions (``eos*_ngc24.04_nemo``), the
#: first whose implementation maps FP8 parameters (custom.yaml ``fp8_params``) and whose configs
#: set the forward reduce-scatters' FP8 buffers / atomic GEMMs
#: (:func:`stage_explore.validation.infer_userbuffers.mlperf_gpt3_forward_scatters`). The v3.1
#: implementation (``eos*_ngc23.09_nemo``, mlcommons/training_results_v3.1 f33f9444
#: NVIDIA/benchmarks/gpt3/implementations/pytorch) has neither: its conf/custom.yaml maps no
#: ``fp8_params`` and its conf/tp_overlap/h100tp4pp8mbs1.yaml runs ``proj_fprop`` and
#: ``fc2_fprop`` as plain pipelines (no ``atomic_gemm`` / ``fp8_buf`` key). Its
#: config_common.sh (not in NVIDIA's stored v3.1 folder; the Azure+NVIDIA submission's copy of the
#: same implementation, f33f9444 Azure+NVIDIA/benchmarks/gpt3/implementations/pytorch, read
#: 6 Dec 2026, s27 hidden21) exports ``UB_SKIPMC=1`` (:data:`V31_NO_MULTICAST`) and
#: ``NVTE_UB_SPLIT_RS=0`` / ``NVTE_UB_ATOMIC_GEMM_RS=1`` ("use FP8/MC strided atomic RS").
MLPERF_GPT3_V40 = (24, 4)
V31_FP8_NOTE = (
    "no FP8 parameters and no FP8 buffer on the forward reduce-scatters (no fp8_param_gather or "
    "ub_*_fprop_fp8_buf): the v3.1 implementation (mlcommons/training_results_v3.1 f33f9444 "
    "NVIDIA/benchmarks/gpt3/implementations/pytorch) maps no fp8_params in conf/custom.yaml, "
    "and conf/tp_overlap/h100tp4pp8mbs1.yaml sets proj_fprop / fc2_fprop method pipeline with "
    "no atomic_gemm or fp8_buf key; its config_common.sh (the Azure+NVIDIA copy) exports "
    "NVTE_UB_SPLIT_RS=0 and NVTE_UB_ATOMIC_GEMM_RS=1, Transformer Engine 1.0's environment "
    "switch to atomic-GEMM reduce-scatters (no stored TE version reads it: not set as an "
    "option; an atomic-GEMM reduce-scatter differs from a pipeline here only in taking no "
    "multicast, which UB_SKIPMC=1 already removes); the FP8 parameters and FP8 buffers entered "
    "with the v4.0 implementation (ngc24.04) ({said}; the text names MLPerf)"
)
#: The v3.1 implementation's userbuffers without CUDA multicast: its config_common.sh exports
#: ``UB_SKIPMC=1`` (Azure+NVIDIA's copy, mlcommons/training_results_v3.1 f33f9444; NVIDIA's own
#: folder stores no config_common.sh), which Transformer Engine's ``create_communicator_grouped2``
#: reads (``!getenv("UB_SKIPMC")`` → no ``use_mc``); the v4.0 / v4.1 config_common.sh ``unset
#: UB_SKIPMC`` (henrique/training_results_v4.0 1316e93c; Oracle's v4.1 copy, swsok/
#: training_results_v4.1 8821c703 Oracle/benchmarks/gpt3/DGXH100_384x8x32x4x8_mbs2).
V31_NO_MULTICAST = (
    "userbuffers without CUDA multicast (ub_multicast false: the pipeline and bulk kernels on "
    "IPC handles, timed as rings): the v3.1 implementation's config_common.sh exports "
    "UB_SKIPMC=1 (mlcommons/training_results_v3.1 f33f9444 Azure+NVIDIA/benchmarks/gpt3/"
    "implementations/pytorch/config_common.sh, the copy of NVIDIA's, whose own folder does not "
    "store it); Transformer Engine's create_communicator_grouped2 then sets no use_mc; the "
    "v4.0 / v4.1 ones unset it ({said}; the text names MLPerf)"
)


def mlperf_gpt3(precision: str, release: tuple[int, int], said: str, out: Defaults) -> None:
    """NVIDIA's MLPerf Training GPT-3 175B implementation on NeMo 1.x (mlcommons
    training_results_v4.0 / v4.1 NVIDIA/benchmarks/gpt3/implementations/*_nemo: config_common.sh
    USE_DIST_OPTIMIZER=True, TP_COMM_OVERLAP=True, FP8_PARAMS=True; conf/optim/
    distributed_fused_adam.yaml); a container before :data:`MLPERF_GPT3_V40` (the v3.1 round's
    23.09) without the FP8 parameters its implementation did not map yet and without userbuffers
    multicast (:data:`V31_NO_MULTICAST`)."""
    out.options["distributed_fused_adam"] = "fp32"
    out.parallel["grad_fp32"] = False
    out.options["ub_bulk_sm_margin"] = False
    out.notes.append(
        "Apex's DistributedFusedAdam with its default fp32 state (distributed_fused_adam fp32), "
        "gradients reduced in bf16 (grad_fp32 false), userbuffers bulk overlaps without an SM "
        "margin (ub_bulk_sm_margin false): NVIDIA's MLPerf GPT-3 implementation on NeMo 1.x "
        "(config_common.sh USE_DIST_OPTIMIZER=True; conf/optim/distributed_fused_adam.yaml "
        "grad_sync_dtype bf16, no dtype; conf/tp_overlap/*.yaml bulk overlaps set_sm_margin 0; "
        f"mlcommons/training_results_v4.0 62f111b7, v4.1) ({said}; the text names MLPerf)"
    )
    if release >= (24, 9):
        out.options["native_cross_entropy"] = True
        out.notes.append(
            "the loss as Megatron-Core's native fused cross-entropy (native_cross_entropy): the "
            "v4.1 conf/custom.yaml (eos_n32_ngc24.09_nemo, swsok/training_results_v4.1 8821c703) "
            "sets cross_entropy_loss_fusion ${oc.env:CROSS_ENTROPY_LOSS_FUSION,True}, which NeMo "
            "1.0 copies into Megatron-Core's TransformerConfig (default impl 'native'); the v4.0 "
            f"one names none ({said}; the text names MLPerf)"
        )
    if release < MLPERF_GPT3_V40:
        out.options["ub_multicast"] = False
        out.notes.append(V31_NO_MULTICAST.format(said=said))
    if precision == "fp8" and release < MLPERF_GPT3_V40:
        out.notes.append(V31_FP8_NOTE.format(said=said))
    elif precision == "fp8":
        out.options["fp8_param_gather"] = True
        out.notes.append(
            "FP8 parameters (fp8_param_gather): the MLPerf GPT-3 config_common.sh FP8_PARAMS=True "
            f"read by custom.yaml fp8_params ({said}; the text names MLPerf)"
        )
        if release >= (24, 9):
            out.options["fp8_amax_reduction"] = "tp_cp"
            out.notes.append(
                "FP8 amaxes reduced over the tensor- and context-parallel group only "
                "(fp8_amax_reduction tp_cp): the v4.1 conf/custom.yaml (ngc24.09) sets "
                "tp_only_amax_red ${oc.env:TP_ONLY_AMAX_RED,True} (Megatron-Core "
                f"--tp-only-amax-red); the v4.0 one names none ({said}; the text names MLPerf)"
            )


#: NVIDIA's MLPerf Training GPT-3 175B rounds on NeMo 1.x, by the round a row's text names, with
#: the container their implementations name (mlcommons training_results_v3.1 f33f9444:
#: ``eos*_ngc23.09_nemo``, the Dockerfile's pytorch:23.09-py3; training_results_v4.0 62f111b7:
#: ``eos_n*_ngc24.04_nemo``; v4.1, swsok/training_results_v4.1 8821c703: ``eos_n*_ngc24.09_nemo``,
#: and the same round's ``b200_n8_preview_nemo``, whose conf/custom.yaml and config_common.sh set
#: the v4.1 values :func:`mlperf_gpt3` reads: USE_DIST_OPTIMIZER, FP8_PARAMS,
#: cross_entropy_loss_fusion and tp_only_amax_red defaults True).
MLPERF_GPT3_ROUNDS = {(3, 1): (23, 9), (4, 0): (24, 4), (4, 1): (24, 9)}
#: The v4.1 implementation's Blackwell userbuffers configs (b200_n8_preview_nemo
#: conf/tp_overlap/b200tp{tp}mbs{mbs}.yaml): ``fc2_fprop`` method
#: ``${FC2_FPROP_METHOD,ring_exchange}`` in b200tp4mbs1 / tp4mbs2 / tp8mbs1, ``pipeline`` in
#: tp8mbs2; ``proj_fprop`` a pipeline in all four. (tp, micro-batch) of the ring-exchange ones.
MLPERF_B200_FC2_RING = ((4, 1), (4, 2), (8, 1))


def mlperf_gpt3_round(
    row: dict[str, str], precision: str, blackwell: bool, tp: int, out: Defaults
) -> bool:
    """A GPT-3 row naming an MLPerf Training round of NVIDIA's NeMo 1.x implementation
    (:data:`MLPERF_GPT3_ROUNDS`) but no container: the implementation's settings
    (:func:`mlperf_gpt3`) as that round's containers run them; on Blackwell with tp > 1 the
    forward reduce-scatter methods of its ``b200tp*mbs*.yaml`` (``blackwell``: the row's preset is
    Blackwell or later). Whether a round was named."""
    found = mlperf_training_round(row_text(row))
    release = MLPERF_GPT3_ROUNDS.get(found) if found else None
    if found is None or release is None:
        return False
    said = f"the text names MLPerf Training v{found[0]}.{found[1]}, no container"
    mlperf_gpt3(precision, release, said, out)
    micro_batch = cell(row, "micro_batch") or 1
    if blackwell and (tp, micro_batch) in MLPERF_B200_FC2_RING:
        out.options["ub_fc2_fprop_method"] = "ring_exchange"
        out.notes.append(
            "userbuffers fc2_fprop as a ring-exchange reduce-scatter (ub_fc2_fprop_method "
            f"ring_exchange): conf/tp_overlap/b200tp{tp}mbs{micro_batch}.yaml of the v4.1 "
            "b200_n8_preview_nemo implementation, fc2_fprop method "
            "${FC2_FPROP_METHOD,ring_exchange} (swsok/training_results_v4.1 8821c703) "
            f"({said})"
        )
    return True


#: The userbuffers switches an MLPerf implementation's config exports, as a row's text states
#: them (``TP_COMM_OVERLAP=False``, ``UB_SKIPMC=1``): NVIDIA's NeMo implementations read
#: ``TP_COMM_OVERLAP`` into the model's tensor-parallel communication overlap
#: (conf/custom.yaml ``ub_tp_comm_overlap: ${oc.env:TP_COMM_OVERLAP,False}``, mlcommons/
#: training_results_v3.1 f33f9444 NVIDIA/benchmarks/gpt3/implementations/pytorch; the NeMo 2.0
#: implementation's conf/custom.yaml the same line, prishajain1/training_results_v5.0 0fdc28f0
#: NVIDIA/benchmarks/llama31_405b/implementations/tyche_ngpu512_ngc25.04_nemo), and Transformer
#: Engine's ``create_communicator_grouped2`` maps no multicast under ``UB_SKIPMC`` (mlcommons/
#: training_results_v5.1 4da2d1cd NVIDIA/benchmarks/llama31_405b/implementations/
#: hsg_ngpu2560_ngc25.09_nemo/config_GB200_640x4x24xtp4pp8cp2_cg_fp4.sh exports
#: ``TP_COMM_OVERLAP=False`` and ``UB_SKIPMC=1``; read 6 Dec 2026, s27 hidden21).
_TP_COMM_OVERLAP = re.compile(r"\bTP_COMM_OVERLAP\s*=\s*(True|False|1|0)\b")
_UB_SKIPMC = re.compile(r"\bUB_SKIPMC\s*=\s*1\b")
#: Megatron-Core DistributedDataParallelConfig's ``fp8_param_gather`` as a row quotes a log's
#: printed configuration (``fp8_param_gather=False``, ``fp8_param_gather false``,
#: ``fp8_param_gather: true``).
_FP8_PARAM_GATHER = re.compile(r"\bfp8_param_gather\s*[=:]?\s*(true|false)\b", re.IGNORECASE)
#: The era note :data:`~stage_explore.validation.infer_megatron.MEGATRON_CORE_ERAS` adds for
#: its FP8-parameter default, replaced when the row states the switch.
_FP8_PARAMS_NOTE = "FP8 parameters (framework option fp8_param_gather)"


def mlperf_stated_switches(row: dict[str, str], out: Defaults) -> None:
    """An MLPerf row's stated ``TP_COMM_OVERLAP`` / ``UB_SKIPMC=1`` into ``out``'s options
    (``tp_comm_overlap``, ``ub_multicast``), each with its assumption; a row stating
    ``TP_COMM_OVERLAP`` both ways is left to the defaults. A quoted ``fp8_param_gather``
    (:data:`_FP8_PARAM_GATHER`, one value) replaces the FP8-parameter default the container era
    set (only where one was set: an FP8 row of a recipe that gathers FP8 parameters)."""
    text = row_text(row)
    values = {m.group(1) in ("True", "1") for m in _TP_COMM_OVERLAP.finditer(text)}
    if len(values) == 1:
        (on,) = values
        out.options["tp_comm_overlap"] = on
        out.notes.append(
            f"TP communication overlap {'on' if on else 'off'} (tp_comm_overlap "
            f"{str(on).lower()}): the text states the implementation's TP_COMM_OVERLAP="
            f"{on} (its conf/custom.yaml ub_tp_comm_overlap reads that variable)"
        )
    if _UB_SKIPMC.search(text):
        out.options["ub_multicast"] = False
        out.notes.append(
            "userbuffers without CUDA multicast (ub_multicast false): the text states "
            "UB_SKIPMC=1 (Transformer Engine's create_communicator_grouped2 then maps no "
            "multicast)"
        )
    gathers = {m.group(1).lower() == "true" for m in _FP8_PARAM_GATHER.finditer(text)}
    if len(gathers) == 1 and "fp8_param_gather" in out.options:
        (on,) = gathers
        out.options["fp8_param_gather"] = on
        out.notes[:] = [n for n in out.notes if not n.startswith(_FP8_PARAMS_NOTE)]
        out.notes.append(
            f"FP8 parameters {'on' if on else 'off'} (framework option fp8_param_gather "
            f"{str(on).lower()}): the text quotes the run's Megatron-Core "
            f"DistributedDataParallelConfig fp8_param_gather={on}, in place of the container "
            "era's precision-config default"
        )

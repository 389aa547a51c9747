"""Defaults of the PyTorch-native stacks an inferred setup names (:mod:`stage_explore.validation.
infer_defaults`): NeMo AutoModel's model states, expert sharding, recompute and pipeline split,
and torchtitan's selective checkpointing, compile, AsyncTP, 2025 defaults and pipeline
micro-batches. Every default is cited where it is set and reported as the row's assumption.
"""

from __future__ import annotations

import re
from typing import Any

from stage_core.models import get_flavor
from stage_explore.validation.infer_release import Defaults, dated, row_text

#: NeMo AutoModel's benchmark configs (examples/benchmark/configs/*_te_deepep.yaml):
#: activation_checkpointing per model family, read when the recompute column is empty.
AUTOMODEL_RECOMPUTE = {"deepseek-moe": "full", "qwen3": "full", "gpt-oss": "none"}
_LBS = re.compile(r"\bLBS\s*(\d+)", re.IGNORECASE)


def automodel_defaults(
    row: dict[str, str], flavor: str, stated: dict[str, int], out: Defaults
) -> None:
    """NeMo AutoModel's PyTorch-backend defaults (nemo_automodel, 2025)."""
    spec = get_flavor(flavor)
    if spec.num_experts:
        out.options["bf16_model_states"] = True
        out.notes.append(
            "the model states in bf16 (bf16_model_states: no fp32 master, Adam's moments in "
            "bf16): AutoModel's MoE model classes (components/models/deepseek_v3, qwen3_moe, "
            "gpt_oss model.py) cast the FSDP-sharded model with initialize_weights(dtype="
            "torch.bfloat16), and torch.optim.Adam keeps its moments in the parameter's dtype"
        )
    else:
        out.options.update(fsdp2_copies=True, fsdp_root_unit=True)
        out.notes.append(
            "FSDP2's copy-out / copy-in kernels and the root unit (fsdp2_copies, "
            "fsdp_root_unit): a dense model takes AutoModel's DefaultParallelizationStrategy "
            "(nemo_automodel/components/distributed/parallelizer.py: fully_shard per layer, "
            "then the root model with reshard_after_forward=False)"
        )
    if spec.num_experts:
        out.parallel["etp"] = 1
        out.notes.append(
            "expert tensor parallel size 1: AutoModel shards experts over EP only "
            "(nemo_automodel/components/moe/parallelizer.py)"
        )
    if spec.mtp_layers:
        out.model["mtp_layers"] = 0
        out.notes.append(
            "no multi-token-prediction module (mtp_layers 0): AutoModel's Hugging Face model "
            "trains the main model only"
        )
    family = str(spec.family)
    if family in AUTOMODEL_RECOMPUTE and spec.num_experts and not row.get("recompute", "").strip():
        out.parallel["recompute"] = AUTOMODEL_RECOMPUTE[family]
        out.notes.append(
            f"recompute {AUTOMODEL_RECOMPUTE[family]} for {family}: AutoModel's benchmark "
            "configs (examples/benchmark/configs/*_te_deepep.yaml activation_checkpointing: "
            "every block for DeepSeek-V3 and Qwen3, none for GPT-OSS; the recompute column is "
            "empty)"
        )
    if stated.get("pp", 1) > 1:
        out.parallel["pp_split"] = "front"
        out.notes.append(
            "layers split over the pipeline stages as AutoModel splits them (pp_split front: "
            "num_layers // stages each, one more on the first num_layers % stages; "
            "nemo_automodel/components/distributed/pipelining/functional.py "
            "generate_hf_model_fqn_per_model_part)"
        )
        found = next((m for c in ("dp_sharding", "source_table", "notes")
                      if (m := _LBS.search(row.get(c, "")))), None)  # fmt: skip
        if found:
            out.options["local_batch_size"] = int(found.group(1))
            out.notes.append(
                f"each local batch of {found.group(1)} sequences its own pipeline schedule "
                "(local_batch_size; the text's LBS): nemo_automodel train_ft.py "
                "_forward_backward_step steps the schedule once per local batch"
            )


#: torchtitan's 2025 defaults (the torchtitan profile stands for its code of December 2024):
#: (first (year, month), needs torch.compile, field kind, name, value, why).
TORCHTITAN_ERAS: tuple[tuple[tuple[int, int], bool, str, str, Any, str], ...] = (
    ((2025, 4), True, "options", "loss_fp32_buffers", 0,
     "the loss compiled with the blocks (loss_fp32_buffers 0): since pytorch/torchtitan#1033 "
     "(Apr 2025) build_cross_entropy_loss wraps the fp32 cross-entropy in torch.compile when "
     "training.compile is set"),
    ((2025, 4), False, "options", "optimizer_foreach", False,
     "the fused AdamW (optimizer_foreach false): torchtitan's optimizer.implementation "
     "defaults to 'fused' in 2025 (the foreach AdamW of December 2024 was the old default)"),
)  # fmt: skip


def torchtitan_pipeline(
    row: dict[str, str], stated: dict[str, int], dp: int, out: Defaults
) -> None:
    """torchtitan's pipeline defaults when the CSV leaves micro-batch / vpp empty: 2 stages
    per rank for a looped (interleaved) schedule, and as many micro-batches as pipeline ranks
    (as pipeline ranks × stages per rank after pytorch/torchtitan#781, 7 Jan 2025)."""
    pp = stated.get("pp", 1)
    if pp <= 1:
        return
    table = row.get("source_table", "").lower()
    vpp = stated.get("vpp", 1)
    if "vpp" not in stated and re.search(r"interleaved", table):
        vpp = out.parallel["vpp"] = 2
        out.notes.append(
            "two stages per rank (vpp 2) for the interleaved schedule the table names: "
            "torchtitan's generate_split_points default for looped schedules"
        )
    if "micro_batch" in stated or "global_batch_seqs" not in stated:
        return
    when = dated(row)
    after = when is not None and when >= (2025, 1)
    count = pp * vpp if after else pp
    local = stated["global_batch_seqs"] // max(dp, 1)
    if local % count == 0 and local >= count:
        out.parallel["micro_batch"] = local // count
        out.notes.append(
            f"micro-batch {local // count}: {count} micro-batches of the local batch {local} "
            "(global batch / dp): torchtitan's build_pipeline_schedule takes "
            + (
                "pipeline ranks x stages per rank (pytorch/torchtitan#781, 7 Jan 2025)"
                if after
                else "as many as pipeline ranks (its code before pytorch/torchtitan#781)"
            )
            + " when pipeline_parallel_microbatches is unset"
        )


def torchtitan_defaults(row: dict[str, str], recompute: str, tp: int, out: Defaults) -> None:
    text = row_text(row).lower()
    table = row.get("source_table", "").lower()
    compiled = bool(re.search(r"torch\.compile|--training\.compile|\bcompile\b", text))
    if recompute == "selective" and not re.search(r"selective[\s_-]*layer", table):
        out.parallel["recompute_modules"] = ("op",)
        out.notes.append(
            "torchtitan's selective AC as the op-level policy (recompute_modules ['op']): the "
            "train configs' activation_checkpoint mode 'selective' with selective_ac_option "
            "'op' (torchtitan/models/llama3/train_configs/*.toml; parallelize _save_list)"
        )
    if compiled:
        out.options["fused_elementwise"] = True
        out.notes.append(
            "torch.compile per block (fused_elementwise): the text names torch.compile "
            "(torchtitan --training.compile compiles each transformer block)"
        )
    if tp > 1 and re.search(r"async[\s_-]*tp", table) and not re.search(r"vanilla\s*tp", table):
        out.options["tp_comm_overlap"] = True
        out.notes.append(
            "asynchronous TP (tp_comm_overlap): the source table names AsyncTP "
            "(torchtitan --parallelism.enable_async_tensor_parallel)"
        )
    when = dated(row)
    for first, needs_compile, _, name, value, why in TORCHTITAN_ERAS:
        if when is not None and when >= first and (compiled or not needs_compile):
            out.options[name] = value
            out.notes.append(f"{why} (the text dates the run {when[0]}-{when[1]:02d})")

"""What the NeMo 1.x launcher's example scripts set for NVIDIA's own performance-summary runs,
for inferred setups (:func:`launcher_grad_sync`, called by
:mod:`stage_explore.validation.infer_megatron` for a NeMo 1.x container), and the fused loss and
the named configs of the launcher's model yamls (:func:`launcher_loss`, :func:`launcher_config`,
moved here from infer_megatron in s18 split6).

NeMo's performance summary (``docs/source/performance/performance_summary.md``) of the 24.xx
containers states each run's model, GPUs, batch and layout; the NeMo-Framework-Launcher runs
them from ``examples/training/<family>/<gpu>/<model>_<precision>.sh``, which pick the model's
training yaml and add overrides (the hand-written NEMO2407 Llama 2 70B / Llama 3 rows read
their scripts, whose node counts and batches are the table's). The stored Llama scripts
(NVIDIA/NeMo-Framework-Launcher ``examples/training/llama/h100/``) pass
``+training.model.optim.grad_sync_dtype=bf16`` in every version under the NeMo-Framework-Launcher
naming, the versions the hand-written NEMO2407 rows read for 24.07 (``llama2_7b_fp8.sh``
7d6e2df9, ``llama2_7b_bf16.sh`` 329df4af, ``llama2_13b_fp8.sh`` edc90457, ``llama2_70b_fp8.sh``
329df4af, ``llama2_70b_bf16.sh`` 7d6e2df9, ``llama3_8b_fp8.sh`` 329df4af, ``llama3_405b_fp8.sh``
1ab2c781, ``llama3_405b_bf16.sh`` 072ecc47), and in every Llama 3 script from its first
versions, still named NeMo-Megatron-Launcher (``llama3_8b_fp8.sh`` 7e91d096,
``llama3_8b_bf16.sh`` a3f31000, ``llama3_70b_fp8.sh`` / ``_bf16.sh`` 4a9b61bc); the older Llama 2
versions of that naming (``llama2_7b_fp8.sh`` / ``llama2_13b_fp8.sh`` 5bf099e0,
``llama2_70b_bf16.sh`` 3a6207d0) pass none (``llama2_13b_bf16.sh`` b44a35d6 does). So the rule
takes Llama 3 / 3.1 rows from 24.05 (the first container after the Llama 3 scripts) and Llama 2
rows from 24.07 (the renamed launcher's). NeMo 1.x reads ``optim.grad_sync_dtype`` into the
gradient reduction: ``MegatronGPTModel.setup_mcore_distributed_parallel`` under
``mcore_distributed_optim`` (``grad_reduce_in_fp32=(optim.get('grad_sync_dtype', 'fp32') ==
'fp32')``), Apex ``DistributedFusedAdam``'s ``grad_sync_dtype`` otherwise. The Nemotron
scripts (``nemotron_8b_fp8.sh`` / ``nemotron_22b_fp8.sh`` edc90457) pass no such override and
the GPT-3 FP8 performance yamls set it themselves (:data:`LAUNCHER_CONFIGS`), so
the rule is the Llama family's.
"""

from __future__ import annotations

import re

from stage_explore.validation.infer_release import CONTAINER_COLUMNS, Defaults, row_text

#: NeMo's performance summary named in a row's text (not DGX Cloud's recipes, not MLPerf, not
#: the long-sequence table, which run configs of their own).
_PERFORMANCE_SUMMARY = re.compile(r"\bnemo\b[^;]*\bperformance\s+summary\b", re.IGNORECASE)
#: The NeMo 1.x containers whose launcher scripts the rule reads (module docstring): Llama 3 /
#: 3.1 from :data:`FIRST_LLAMA3`, other Llama rows (Llama 2) from :data:`FIRST`, to :data:`LAST`.
FIRST, FIRST_LLAMA3, LAST = (24, 7), (24, 5), (24, 12)
_LLAMA3 = re.compile(r"llama[\s_-]*3", re.IGNORECASE)
#: Model families whose launcher example scripts pass grad_sync_dtype=bf16.
FAMILIES = ("llama",)
#: The scripts' GPU folders read (``examples/training/llama/h100``).
GPU_PRESET = re.compile(r"^h100")


def launcher_grad_sync(
    row: dict[str, str], family: str, release: tuple[int, int], system: str, out: Defaults
) -> None:
    """Gradients reduced in bf16 for a Llama row of NeMo's performance summary on a NeMo 1.x
    container on H100 (Llama 3 from 24.05, Llama 2 from 24.07, to 24.12): what the launcher's
    example script of that model passes (module docstring); nothing for any other row."""
    first = FIRST_LLAMA3 if _LLAMA3.search(row.get("model", "")) else FIRST
    if not first <= release <= LAST or family not in FAMILIES or not GPU_PRESET.match(system):
        return
    text = row_text(row)
    if not _PERFORMANCE_SUMMARY.search(text) or re.search(r"mlperf|dgx cloud", text, re.I):
        return
    out.parallel["grad_fp32"] = False
    out.notes.append(
        "gradients reduced in bf16 (grad_fp32 false): NeMo's performance summary runs the "
        "NeMo-Framework-Launcher's example scripts, and every stored Llama one from the Llama 3 "
        "scripts on passes +training.model.optim.grad_sync_dtype=bf16 "
        "(examples/training/llama/h100/llama2_7b_fp8.sh 7d6e2df9, llama2_13b_fp8.sh edc90457, "
        "llama2_70b_fp8.sh 329df4af, llama3_8b_fp8.sh 329df4af, llama3_70b_fp8.sh 4a9b61bc, "
        "llama3_405b_fp8.sh 1ab2c781 and their bf16 siblings) (the text names NeMo's "
        f"performance summary and container {release[0]}.{release[1]:02d})"
    )


#: NeMo 1.x launcher model yamls that set ``optim.grad_sync_dtype: bf16`` themselves, whatever
#: script runs them: (family, hidden size, why). Nemotron-4 340B (hidden 18432; the family's
#: other sizes, ``nemotron_8b`` / ``_15b`` / ``_22b``, set none in the versions the hand-written
#: rows read).
LAUNCHER_YAMLS: tuple[tuple[str, int, str], ...] = (
    ("nemotron", 18432,
     "NeMo-Framework-Launcher launcher_scripts/conf/training/nemotron/nemotron_340b.yaml sets "
     "optim grad_sync_dtype bf16 (3be81fc1 with mcore_distributed_optim, 6daee02a with "
     "distributed_fused_adam: the two of its stored versions read)"),
)  # fmt: skip


def launcher_yaml_grad_sync(family: str, hidden: int, said: str, out: Defaults) -> None:
    """Gradients reduced in bf16 for a NeMo 1.x row of a model whose launcher yaml sets it
    (:data:`LAUNCHER_YAMLS`, keyed on the model family and hidden size the row states)."""
    for name, size, why in LAUNCHER_YAMLS:
        if family == name and hidden == size:
            out.parallel["grad_fp32"] = False
            out.notes.append(f"gradients reduced in bf16 (grad_fp32 false): {why} ({said})")
            return


#: NeMo 1.x launcher model yamls that set cross_entropy_loss_fusion true, by the model text's
#: pattern: (pattern, why). NeMo 1.0's MegatronBaseModel.build_transformer_config copies the
#: TransformerConfig fields a model yaml names and nothing sets cross_entropy_fusion_impl
#: (Megatron-Core's default 'native'), so Megatron-Core's GPTModel calls
#: fused_vocab_parallel_cross_entropy.
LAUNCHER_LOSS: tuple[tuple[str, str], ...] = (
    (r"llama[\s_-]*3\.1",
     "NeMo-Framework-Launcher launcher_scripts/conf/training/llama/llama3_1_8b.yaml "
     "(2ac7cee8), llama3_1_70b.yaml (1ab2c781) and llama3_1_405b.yaml (072ecc47) set "
     "cross_entropy_loss_fusion true"),
)  # fmt: skip


def launcher_loss(row: dict[str, str], said: str, out: Defaults) -> None:
    """The fused loss of a NeMo 1.x launcher model yaml (:data:`LAUNCHER_LOSS`)."""
    for pattern, why in LAUNCHER_LOSS:
        if re.search(pattern, row.get("model", ""), re.IGNORECASE):
            out.options["native_cross_entropy"] = True
            out.notes.append(
                "the loss as Megatron-Core's native fused cross-entropy (native_cross_entropy): "
                f"{why}; NeMo 1.0 copies it into Megatron-Core's TransformerConfig and sets no "
                f"cross_entropy_fusion_impl (default 'native') ({said}; a NeMo 1.x container)"
            )
            return


#: NeMo 1.x launcher training configs a row may name (its text or ``uncertain`` column), with the
#: recompute and gradient-sync settings every stored version sets: (pattern, why). The three
#: GPT-3 FP8 performance configs (NVIDIA/NeMo-Framework-Launcher 1e46ac6c
#: launcher_scripts/conf/training/gpt3/{5b,20b,175b}_fp8_performance.yaml) set
#: activations_checkpoint_granularity selective and optim grad_sync_dtype bf16; the plain
#: gpt3/5b.yaml (00af8f26) sets neither, so the rule needs the named performance config.
LAUNCHER_CONFIGS: tuple[tuple[str, str], ...] = (
    (r"gpt3/(?:5b|20b|175b)_fp8_performance\.yaml",
     "NeMo-Framework-Launcher launcher_scripts/conf/training/gpt3/{5b,20b,175b}_fp8_performance"
     ".yaml (1e46ac6c): activations_checkpoint_granularity selective, optim "
     "distributed_fused_adam grad_sync_dtype bf16"),
)  # fmt: skip


def launcher_config(row: dict[str, str], said: str, out: Defaults) -> None:
    """The selective recompute (when the recompute column is empty) and bf16 gradient
    reduction of a NeMo 1.x launcher config the row names (:data:`LAUNCHER_CONFIGS`)."""
    text = row_text(row, CONTAINER_COLUMNS)
    for pattern, why in LAUNCHER_CONFIGS:
        if not re.search(pattern, text, re.IGNORECASE):
            continue
        out.parallel["grad_fp32"] = False
        what = "gradients reduced in bf16 (grad_fp32 false)"
        if not row.get("recompute", "").strip():
            out.parallel["recompute"] = "selective"
            what = f"selective recompute of the core attention, {what}"
        out.notes.append(f"{what}: the row names the launcher config; {why} ({said})")
        return

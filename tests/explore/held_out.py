"""The held-out published runs of ``published_runs_held_out.csv`` as the tests of
``test_validate_held_out*.py`` read them: the sources of the file and their id prefixes, system
presets or files and frameworks, the rows the generator cannot express, the file's rows as
read by :mod:`csv` and the cases :func:`~stage_explore.validation.setups.load_cases` makes of
them."""

from __future__ import annotations

import csv

from stage_explore.validation.setups import Case, data_dir
from tests.explore.package_cases import package_cases

DATA = data_dir()
HELD_OUT = "published_runs_held_out.csv"
SOURCES = {"TORCHTITAN": "tokens_per_s_per_gpu", "TORCHTITAN-MEM": "peak_mem_gib"}
#: Megatron-Bridge dense rows: source → (id prefix, system preset).
MBRIDGE = {
    "MBRIDGE-H100": ("MBD-H100-", "h100-80gb"),
    "MBRIDGE-B200": ("MBD-B200-", "b200"),
    "MBRIDGE-GB200": ("MBD-GB200-", "gb200-nvl72"),
    "MBRIDGE-GB300": ("MBD-GB300-", "gb300-nvl72"),
}
#: One-metric sources of the file: source → (id prefix, system preset, framework).
OTHERS = {
    **{name: (prefix, system, "megatron-core") for name, (prefix, system) in MBRIDGE.items()},
    "AUTOMODEL": ("AUTOMODEL-H100-", "h100-80gb", "automodel"),
    "AUTOMODEL-DENSE": ("AUTOMODEL-DENSE-H100-", "h100-80gb", "automodel"),
    "NEMO2407-H100": ("NEMO2407-H100-", "h100-80gb", "megatron-core"),
    "DGXC-H100-BF16": ("DGXC-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC-H100-FP8": ("DGXC-H100-FP8-", "h100-80gb", "megatron-core"),
    "NEMO2502-B200": ("NEMO2502-B200-", "b200", "megatron-core"),
    "DGXC-GPT3-BF16": ("DGXC-GPT3-BF16-", "h100-80gb", "megatron-core"),
    "DGXC-GPT3-FP8": ("DGXC-GPT3-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2502-H100-BF16": ("DGXC2502-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2502-H100-FP8": ("DGXC2502-H100-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2502-GPT3-BF16": ("DGXC2502-GPT3-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2502-GPT3-FP8": ("DGXC2502-GPT3-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2504-H100-BF16": ("DGXC2504-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2504-H100-FP8": ("DGXC2504-H100-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2411-H100-BF16": ("DGXC2411-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2411-H100-FP8": ("DGXC2411-H100-FP8-", "h100-80gb", "megatron-core"),
    "DGXC-GROK1-BF16": ("DGXC-GROK1-BF16-", "h100-80gb", "megatron-core"),
    "DGXC-GROK1-FP8": ("DGXC-GROK1-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2502-GROK1-BF16": ("DGXC2502-GROK1-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2502-GROK1-FP8": ("DGXC2502-GROK1-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2505-GROK1-H100-BF16": ("DGXC2505-GROK1-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2505-GROK1-H100-FP8": ("DGXC2505-GROK1-H100-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2505-GROK1-GB200-BF16": ("DGXC2505-GROK1-GB200-BF16-", "gb200-nvl72", "megatron-core"),
    "DGXC2505-GROK1-GB200-FP8": ("DGXC2505-GROK1-GB200-FP8-", "gb200-nvl72", "megatron-core"),
    "DGXC2505-DSV3-H100-BF16": ("DGXC2505-DSV3-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2505-DSV3-GB200-BF16": ("DGXC2505-DSV3-GB200-BF16-", "gb200-nvl72", "megatron-core"),
    "DGXC2505-H100-BF16": ("DGXC2505-H100-BF16-", "h100-80gb", "megatron-core"),
    "DGXC2505-H100-FP8": ("DGXC2505-H100-FP8-", "h100-80gb", "megatron-core"),
    "DGXC2505-GB200-BF16": ("DGXC2505-GB200-BF16-", "gb200-nvl72", "megatron-core"),
    "DGXC2505-GB200-FP8": ("DGXC2505-GB200-FP8-", "gb200-nvl72", "megatron-core"),
    "NEMO2502-H100": ("NEMO2502-H100-", "h100-80gb", "megatron-core"),
    "TRAINY-H200": ("TRAINY-H200-", "h200", "torchtitan"),
    "NEMO2403-LONGSEQ-H100": ("NEMO2403-LONGSEQ-H100-", "h100-80gb", "megatron-core"),
    "MBRIDGE-MOE-B200": ("MBM-B200-", "b200", "megatron-core"),
    "MBRIDGE-MOE-B300": ("MBM-B300-", "b300", "megatron-core"),
    "TORCHTITAN-A100": ("TTA100-", "a100-80gb", "torchtitan"),
    "MLPERF-GPT3-H100": ("MLPERF-GPT3-H100-", "h100-80gb", "megatron-core"),
    "MLPERF-GPT3-B200": ("MLPERF-GPT3-B200-", "b200", "megatron-core"),
    "MLPERF-L405B-H100": ("MLPERF-L405B-H100-", "h100-80gb", "megatron-core"),
    "NEMOPERF-B200": ("NEMOPERF-B200-", "b200", "megatron-core"),
    "MLPERF-L405B-GB200": ("MLPERF-L405B-GB200-", "gb200-nvl72", "megatron-core"),
    "LLAMA3-405B": ("LLAMA3-405B-", "h100-80gb", "torchtitan"),
}
#: Memory sources on the rows of a throughput source: source → (id prefix, preset, framework).
MEMORY = {"TRAINY-H200-MEM": ("TRAINY-H200-", "h200", "torchtitan")}
#: Id prefixes of the rows that serve two sources (throughput and memory).
TWO_METRICS = ("TTITAN-", "TRAINY-H200-")
#: One-metric sources on a system file of the data folder: source → (id prefix, file, framework).
ON_FILES = {
    "IBMFSDP-H100": ("IBMFSDP-H100-", "ibm-h100-800g.toml", "fms-fsdp"),
    "IBMFSDP-A100": ("IBMFSDP-A100-", "ibm-a100-400g.toml", "fms-fsdp"),
    "FMSFSDP-A100": ("FMSFSDP-A100-", "ibm-a100-400g.toml", "fms-fsdp"),
    "TORCHTITAN-ASYNCTP": ("TTASYNC-", "grand-teton-h100.toml", "torchtitan"),
    "BLOOM": ("BLOOM-", "jean-zay-a100.toml", "deepspeed"),
}
#: Rows the generator cannot express (each with its reason in setups.toml).
NOT_EVALUATED = {
    # (fms-fsdp's 13b rows left it in s34 fmssel: one block in every 2, from the blog's HFU / MFU)
    # Meta's interleaved schedule with a tunable number of contiguous micro-batches
    "LLAMA3-405B-8192", "LLAMA3-405B-16384",
}  # fmt: skip


def csv_rows(name: str) -> list[dict[str, str]]:
    """The rows of the data folder's CSV file ``name`` as :class:`csv.DictReader` reads them."""
    with (DATA / name).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def held_out_cases() -> list[Case]:
    """The cases of the sources of ``published_runs_held_out.csv``."""
    return [c for c in package_cases() if c.source in {*SOURCES, *OTHERS, *ON_FILES, *MEMORY}]

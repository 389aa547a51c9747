"""``evaluate_serve``'s pool arguments and ``stage eval --phase serve``'s instance options given
values they ignored or misread (s24 review): co-located ``decode_instances=3`` (or
``--decode-instances 3``) gave one instance's figures, ``prefill_instances=2`` without a prefill
layout (or a layout with no instances, or -1 instances) a co-located state, ``decode_instances``
of 0 a rate of 0 and of 1.5 a rate, a ``prefill_tokens_per_step`` of '8192' a TypeError and of
8192.5 an error about the batch. Each is now one line naming the argument."""

from __future__ import annotations

from typing import Any

import pytest

from stage_core.errors import ConfigError
from stage_core.models import get_flavor
from stage_core.serving import ServingConfig
from stage_explore.analytical.backend import AnalyticalBackend
from stage_explore.analytical.serving import RequestMix, evaluate_serve
from stage_explore.cli import main
from stage_explore.system import load_system

MODEL = get_flavor("llama3-8b")
H100 = load_system("h100-80gb")
DECODE = ServingConfig(phase="decode", batch=8)
PREFILL = ServingConfig(phase="prefill", batch=2, prompt_len=512)
MIX = RequestMix(prompt_len=512, output_len=64)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"decode_instances": 3}, r"`decode_instances` sizes a disaggregated decode pool; "
         r"co-located, .* but got decode_instances=3 with prefill_instances=0$"),
        ({"prefill_instances": 2}, r"a disaggregated state needs both `prefill` .* but got "
         r"prefill=None with prefill_instances=2$"),
        ({"prefill": PREFILL}, r"but got prefill=a layout with prefill_instances=0$"),
        ({"prefill": PREFILL, "prefill_instances": -1}, r"`prefill_instances` must be an int ≥ 0"),
        ({"prefill": PREFILL, "prefill_instances": 1, "decode_instances": 0},
         r"`decode_instances` an int ≥ 1, but got \(prefill_instances=1, decode_instances=0\)"),
        ({"prefill": PREFILL, "prefill_instances": 1, "decode_instances": 1.5},
         r"decode_instances=1\.5\)"),
        ({"prefill_tokens_per_step": "8192"},
         r"`prefill_tokens_per_step` must be an int ≥ 1, but got '8192'$"),
        ({"prefill_tokens_per_step": 8192.5}, r"`prefill_tokens_per_step` must be an int ≥ 1"),
    ],
)  # fmt: skip
def test_pool_arguments_that_were_ignored_are_refused(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        evaluate_serve(AnalyticalBackend(), MODEL, DECODE, H100, MIX, **options)


def test_the_valid_pools_still_evaluate() -> None:
    backend = AnalyticalBackend()
    colocated = evaluate_serve(backend, MODEL, DECODE, H100, MIX)
    assert colocated.extra["mode"] == "co-located" and colocated.num_gpus == 1
    split = evaluate_serve(
        backend, MODEL, DECODE, H100, MIX, prefill=PREFILL, prefill_instances=2,
        decode_instances=3,
    )  # fmt: skip
    assert split.extra["mode"] == "disaggregated" and split.num_gpus == 5


def test_decode_instances_without_prefill_instances_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["eval", "--model", "llama3-8b", "--system", "h100-80gb", "--phase", "serve",
            "--batch", "8", "--prompt-len", "512", "--output-len", "64"]  # fmt: skip
    assert main([*argv, "--decode-instances", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stage eval: error: --decode-instances sizes the decode pool of a ")
    assert err.endswith("but got --decode-instances 2 without --prefill-instances\n")
    assert main([*argv, "--decode-instances", "2", "--prefill-instances", "1"]) == 0


def test_a_two_batch_overlap_that_cannot_apply_says_so() -> None:
    """Three sequences per rank cannot be halved: the step runs as one (the command line
    refuses it; the API ran it without the overlap and said nothing)."""
    from dataclasses import replace

    backend = AnalyticalBackend()
    odd = ServingConfig(phase="decode", batch=3, context_len=128, two_batch_overlap=True)
    result = evaluate_serve(backend, MODEL, replace(odd, context_len=0), H100, MIX)
    note = (
        "not applied: 3 sequences per data-parallel rank cannot be halved into two "
        "micro-batches; the step runs as one"
    )
    assert result.extra["two_batch_overlap"] == note
    from stage_explore.analytical.serving import evaluate_decode

    assert evaluate_decode(backend, MODEL, odd, H100).extra["two_batch_overlap"] == note
    even = replace(odd, batch=4)
    assert "two_batch_overlap" not in evaluate_decode(backend, MODEL, even, H100).extra

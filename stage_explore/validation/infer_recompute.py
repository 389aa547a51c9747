"""How many layers a published row's full-recompute cell checkpoints (s26 hidden19).

A ``recompute`` cell that names full (whole-layer) recompute of *some* layers only — ``full
(10 of the 80 layers)``, ``activation checkpointing of 5 of 48 transformer layers
(num-ckpt-layers 5)``, ``full, --recompute-num-layers 4`` — was read as full recompute of every
layer: the count went unread and the run was charged the recompute of all of them. The
frameworks that publish such counts recompute the named number of layers and keep the others'
activations:

- Megatron-LM / Megatron-Core ``--recompute-method block --recompute-num-layers N``: "recompute
  the input activations of only a set number of individual Transformer layers per pipeline stage
  and do the rest without any recomputing" (``megatron/training/arguments.py``, the
  ``--recompute-method`` help; NeMo's ``activations_checkpoint_num_layers`` is the same knob);
  under ``--recompute-method uniform`` N is the size of the chunks every layer is recomputed in,
  so a cell naming ``uniform`` keeps every layer (:data:`UNIFORM`);
- Hugging Face accelerate's FSDP plugin as YaFSDP patches it (``fsdp_num_layers_to_checkpoint``,
  yandex/YaFSDP ``examples/clm.md``: "specify number of layers to checkpoint"; its README's
  ``num-ckpt-layers``: "the number of transformer layers to which activation checkpointing was
  applied"). Which N: the first N decoder layers, whole. YaFSDP's ``patches/transformers.diff``
  (93146ac6) gives accelerate an ``activation_checkpointing_auto_wrap_policy`` matching
  ``next(layer.children())`` for the layers of ``model.model.layers[:N]``, and its
  ``patches/accelerate.diff`` runs ``apply_activation_checkpointing`` with it after wrapping the
  model, when each ``layers[i]`` is the sharding wrapper whose first child is the decoder layer
  (torch FSDP1's ``__init__`` assigns ``self._fsdp_wrapped_module = module``, its only submodule;
  YaFSDP's ``SuperTensorModule`` assigns ``self.root_module`` first) — not the bare layer's first
  child ``self_attn`` (7 Dec 2026, s33 yafsdp2).

:func:`named_num_layers` reads the count; the inference sets ``recompute_num_layers`` (the
``block`` method: the first N layers of each stage, :class:`~stage_core.parallel.ParallelConfig`)
and states it. Which layers a source checkpointed is rarely stated (YaFSDP's patches, above, are
an exception); the time is the same for any N of them, the peak memory is not.

:func:`read_recompute` reads the cell's granularity first (``No``, ``off``, ``Full AC``,
``uniform``, ``yes``: :data:`RECOMPUTE_SPELLINGS`; moved here from
:mod:`~stage_explore.validation.infer_fields`, s33 simplify, where it left that module at 599
lines).
"""

from __future__ import annotations

import re

from stage_core.parallel import RECOMPUTE_MODULES
from stage_explore.validation.infer_errors import Uninferable

#: ``N of [the] M [transformer|decoder] layers``: N checkpointed out of M (whole numbers: the
#: ``5`` of ``2.5 of 80 layers`` is no count).
_OF_LAYERS = re.compile(
    r"(?<![\d.])(\d+)\s+(?:out\s+)?of\s+(?:the\s+|all\s+)?(\d+)\s+(?:[a-z-]+\s+){0,2}layers?\b",
    re.IGNORECASE,
)
#: A framework's count flag or key followed by its value: Megatron's ``--recompute-num-layers``
#: / ``recompute_num_layers``, NeMo's ``activations_checkpoint_num_layers``, accelerate's
#: (YaFSDP) ``fsdp_num_layers_to_checkpoint`` and its README's ``num-ckpt-layers``.
_NAMED_COUNT = re.compile(
    r"(?:recompute|checkpoint(?:ing)?|ckpt)[-_ ]num[-_ ]layers"
    r"|activations?[-_ ]checkpoint(?:ing)?[-_ ]num[-_ ]layers"
    r"|num[-_ ](?:ckpt|checkpoint(?:ed)?)[-_ ]layers"
    r"|num[-_ ]layers[-_ ]to[-_ ]checkpoint",
    re.IGNORECASE,
)
#: The legacy chunk-size flag ``--checkpoint-num-layers`` / ``checkpoint_num_layers`` (not NeMo's
#: ``activations_checkpoint_num_layers``): Megatron-LM's before the 2022 ``--recompute-*`` flags
#: ("chunk size (number of layers) for checkpointing", default 1, beside
#: ``--checkpoint-activations``, in its 2020-21 ``megatron/arguments.py``; the 2023 version,
#: NVIDIA/Megatron-LM 97d9a508, exits on ``--checkpoint-activations``: "no longer valid, use
#: --recompute-activations"), as Megatron-DeepSpeed and GPT-NeoX keep it ("Chunk size (number of
#: layers) for checkpointing", EleutherAI/gpt-neox e897c23e
#: ``megatron/neox_arguments/neox_args.py``): every layer is checkpointed, N at a time, so its N
#: is no count of checkpointed layers (7 Dec 2026, s31 rowsA: GLM-130B's Table 11
#: ``checkpoint_num_layers 1`` was read as 1 recomputed layer per stage).
_LEGACY_CHUNK = re.compile(r"checkpoint[-_ ]num[-_ ]layers", re.IGNORECASE)
#: The flag's value, a whole number (``1.5`` is none: its ``1`` was read, s27 review).
_FLAG_VALUE = re.compile(r"[\s=:]*(\d+)(?![.,]?\d)")
#: Megatron's uniform method: N is a chunk size, every layer is recomputed.
UNIFORM = re.compile(r"\buniform\b", re.IGNORECASE)


def named_num_layers(cell: str, layers: int | None, chunks: int = 1) -> tuple[int, str] | None:
    """``(N, assumption)`` when a full-recompute ``cell`` names N checkpointed layers of a model
    of ``layers`` (None: not known here), 0 < N < ``layers``, N per model chunk of a run of
    ``chunks`` (pp·vpp) chunks; None when it names no count, names every layer (N ≥ ``layers``,
    or the ``N of M`` form with N ≥ M), names Megatron's uniform method, or names two different
    counts; the legacy ``checkpoint_num_layers`` chunk size (:data:`_LEGACY_CHUNK`) is no
    count. A framework flag's N is per chunk already (Megatron's "per pipeline stage"); the ``N
    of M`` form counts the model's layers, so it is N / ``chunks`` per chunk (s27 review: a run
    of 4 stages read "10 of the 80 layers" as 10 per stage, 40 in all), and :class:`Uninferable`
    when ``chunks`` does not divide N (no chunk-by-chunk split is stated)."""
    if UNIFORM.search(cell):
        return None
    counts: set[int] = set()
    for found in _OF_LAYERS.finditer(cell):
        count, total = int(found.group(1)), int(found.group(2))
        if count < total and count % chunks:
            raise Uninferable(
                f"the recompute column names {count} of {total} layers over {chunks} pipeline "
                f"model chunks (pp·vpp): not a whole number per chunk, and how the source split "
                f"them is not stated ({cell.strip()!r})"
            )
        counts.add(count // chunks if count < total else 0)
    for found in _NAMED_COUNT.finditer(cell):
        if _LEGACY_CHUNK.fullmatch(found.group(0)):
            continue  # a chunk size: every layer is recomputed (_LEGACY_CHUNK)
        value = _FLAG_VALUE.match(cell, found.end())
        if value is not None:
            counts.add(int(value.group(1)))
    if len(counts) != 1:
        return None
    count = counts.pop()
    if count <= 0 or (layers is not None and count >= layers):
        return None
    of = f" of {layers}" if layers is not None else ""
    per = f" per model chunk, {count * chunks} in all" if chunks > 1 else ""
    return count, (
        f"full recompute of {count}{of} layers only{per} (recompute_num_layers {count}, method "
        f"block: the first {count} of each stage, the others keep their activations): the "
        f"recompute column names the count ({cell.strip()!r}); which layers the source "
        "checkpointed is not stated"
    )


#: ``selective (mlp)``, also written ``selective recompute (mlp)``, ``selective activation
#: recomputation (mlp)``, ``recompute: selective (mlp)`` (7 Dec 2026, s30 fuzz: those were read
#: as the default module, the core attention).
_SELECTIVE = re.compile(
    r"\s*(?:(?:activation\s+checkpointing|recompute)\s*[:=]\s*)?selective"
    r"(?:\s+(?:activation\s+)?(?:recomput\w*|checkpointing))?\s*\(([^()]*)\)\s*",
    re.IGNORECASE,
)
#: The spelling :func:`read_recompute` gives a cell it
#: reads: ``selective (<the cell as written>)``.
_WRAPPED = re.compile(r"\s*(?:full|selective|none)\s*\((.*)\)\s*", re.IGNORECASE)


#: A ``selective`` cell that describes its modules in prose (``selective: every RMSNorm and the
#: MLA up-projections recomputed``, the DeepSeek-V3 report's Section 3.2.3 "We recompute all
#: RMSNorm operations and MLA up-projections during back-propagation"): the cell up to its first
#: parenthesis after ``selective`` (or ``selective recompute`` / ``selective activation
#: recomputation`` / ``selective checkpointing``) and ``:`` / ``-``, after an optional label
#: (``recompute: selective: …``, ``activation checkpointing: selective: …``, at the start of
#: the cell only, so a ``full …`` cell names none: the spellings
#: ``benchmarks/spelling_robustness.py`` writes; s37 lead).
_SELECTIVE_PROSE = re.compile(
    r"\s*(?:(?:activation\s+)?(?:recompute|recomputation|checkpointing)\s*[:\-\u2013]\s*)?"
    r"selective(?:\s+(?:activation\s+)?(?:recompute|recomputation|checkpointing))?"
    r"\s*[:\-\u2013]\s*([^()]*)",
    re.IGNORECASE,
)
#: Prose names of Megatron-Core's recompute modules (:mod:`stage_core.recompute`): a norm
#: (``RMSNorm``, ``LayerNorm``) is ``layernorm`` (the norms that are modules of their own; a
#: latent attention's latent norms go with ``mla_up_proj``), latent attention's up-projections
#: are ``mla_up_proj``, the attention core is ``core_attn`` (7 Dec 2026, s37 oomaudit).
PROSE_MODULES: tuple[tuple[str, str], ...] = (
    (r"\b(?:rms|layer)[\s-]?norms?\b", "layernorm"),
    (r"\b(?:mla|latent[\s-]attention(?:'s)?)\s+up[\s-]?projections?\b", "mla_up_proj"),
    (r"\b(?:core[\s-]attention|attention\s+core)\b", "core_attn"),
)


def prose_modules(cell: str) -> tuple[str, ...]:
    """The recompute modules a ``selective: ...`` cell names in prose (:data:`PROSE_MODULES`,
    in that order), () when it names none of them."""
    found = _SELECTIVE_PROSE.match(cell)
    if found is None:
        return ()
    text = found.group(1)
    return tuple(m for pattern, m in PROSE_MODULES if re.search(pattern, text, re.IGNORECASE))


def named_modules(cell: str) -> tuple[str, ...]:
    """The recompute modules a ``selective (...)`` cell names in its parentheses (also as
    :data:`_SELECTIVE` spells it, and inside the cell ``read_recompute`` wrapped), when every
    word there is one of Megatron-Core's ``--recompute-modules`` names
    (:data:`~stage_core.parallel.RECOMPUTE_MODULES`; ``selective (mla_up_proj)``), or that a
    ``selective: ...`` cell names in prose (:func:`prose_modules`); else ()
    (``selective (attention core)`` is prose: the default core attention). Moved from
    :mod:`~stage_explore.validation.infer` (s30 fuzz)."""
    found = _SELECTIVE.fullmatch(cell)
    if found is None:
        wrapped = _WRAPPED.fullmatch(cell)
        return named_modules(wrapped.group(1)) if wrapped else prose_modules(cell)
    names = tuple(n for n in re.split(r"[\s,;+/]+", found.group(1).strip().lower()) if n)
    return names if names and all(n in RECOMPUTE_MODULES for n in names) else ()


#: First words of a ``recompute`` cell that say no recompute.
RECOMPUTE_OFF = r"no|not|off|false|disabled?|without|0"
#: First words of a ``recompute`` cell that name a granularity another way, first match wins:
#: (pattern, granularity, how the cell was read); a cell naming none / selective / full after
#: its first word (``Activation checkpointing: selective``) takes that one first.
RECOMPUTE_SPELLINGS: tuple[tuple[str, str, str], ...] = (
    (r"sel|sac|op", "selective", "selective recompute"),
    (r"uniform|block", "full", "full recompute (Megatron's --recompute-method names full "
     "recompute of whole layers)"),
    (r"yes|y|true|on|enabled?|1|ac|activation|gradient|checkpoint(?:ing|ed)?", "full",
     "full (whole-layer) recompute: the cell says recompute is on but names no granularity"),
)  # fmt: skip
RECOMPUTE_LEVELS = ("none", "selective", "full")


def read_recompute(cell: str) -> tuple[str, str]:
    """``(cell, assumption)``: a ``recompute`` cell whose first word is not ``none`` /
    ``selective`` / ``full`` rewritten to start with the granularity it names
    (:data:`RECOMPUTE_SPELLINGS`: ``No``, ``off``, ``selective(core_attn)``, ``Full AC``,
    ``uniform``, ``yes``), the original kept in parentheses, and the assumption that says so;
    a cell already in that form, an empty one or one no spelling reads is returned as it is
    with no assumption (the setup path names an unknown word as the row's reason)."""
    text = cell.strip()
    words = text.lower().split()
    if not words or words[0].rstrip(",;:") in RECOMPUTE_LEVELS:
        return cell, ""
    token = re.match(r"[a-z0-9]+", text.lower())
    word = token.group(0) if token else ""
    if re.fullmatch(RECOMPUTE_OFF, word):
        word = "none"
    named = re.search(r"\b(none|selective|full)\b", text.lower())
    word = word if word in RECOMPUTE_LEVELS or named is None else named.group(1)
    if word in RECOMPUTE_LEVELS:
        return f"{word} ({text})", f"recompute {word} (the recompute column says {text!r})"
    for pattern, level, how in RECOMPUTE_SPELLINGS:
        if re.fullmatch(pattern, word):
            said = f"the recompute column says {text!r}"
            return f"{level} ({text})", f"recompute {level}: {how} ({said})"
    return cell, ""

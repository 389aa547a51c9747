"""Per-layer kinds and the compact pattern that lays them out over a model's depth.

Contents:

- :class:`Mixer`, :class:`Ffn`: the token-mixing and the feed-forward part of a layer.
- :class:`LayerKind`: one layer's (mixer, ffn) pair, its pattern token (``"swa+moe"``) and the
  name of the block that implements it (:attr:`LayerKind.block`).
- :func:`parse_kind`, :func:`expand_pattern`, :func:`compress_kinds`: the pattern language.
- :func:`layer_kind_of_block`, :func:`is_layer_block`: block names back to layer kinds;
  :func:`kept_block_name`, :func:`is_kept_block`: a layer kept out of a partial recompute;
  :func:`grouped_block_name`, :func:`is_grouped_block`: a layer inside a group of layers
  checkpointed as one unit (Megatron's ``--recompute-method uniform``).

**Pattern language.** A pattern is a comma-separated list of items; an item is a kind token or a
parenthesised list, optionally followed by ``*N`` (repeat ``N`` times) or a bare ``*`` (the one
*open* repeat: it fills the layers the other items leave, cut off after the last layer, as
Gemma's 5-local-1-global cycle over 62 layers). A kind token joins at most one mixer and at most
one FFN with ``+``; a missing part is ``none`` (Nemotron-H's attention-only and MLP-only layers).
Examples: GPT-OSS ``"(swa+moe, attn+moe)*"``; DeepSeek-V3 ``"attn+mlp*3, attn+moe*"``;
Mistral-7B ``"swa+mlp*"``.

Block names: ``attn+mlp`` is the ``"layer"`` block and ``attn+moe`` the ``"moe_layer"`` block,
as before the pattern existed; any other kind is ``"layer_<mixer>_<ffn>"`` (``layer_swa_moe``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

from stage_core.errors import ConfigError


class Mixer(StrEnum):
    """``attn``: full (global) causal attention; ``swa``: causal attention over the last
    ``sliding_window`` tokens; ``mamba``: a Mamba-2 (SSD) state-space mixer
    (:mod:`stage_core.ops_ssm`); ``none``: no token mixing (an FFN-only layer)."""

    ATTENTION = "attn"
    SLIDING = "swa"
    MAMBA = "mamba"
    NONE = "none"


class Ffn(StrEnum):
    """``mlp``: the dense FFN of width ``ffn``; ``moe``: routed experts; ``none``: no FFN."""

    DENSE = "mlp"
    MOE = "moe"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class LayerKind:
    """One layer: a mixer and an FFN, each with its own pre-norm and residual."""

    mixer: Mixer = Mixer.ATTENTION
    ffn: Ffn = Ffn.DENSE

    @property
    def token(self) -> str:
        """The pattern token: ``"swa+moe"``, ``"attn"`` (no FFN), ``"mlp"`` (no mixer)."""
        parts = [str(p) for p in (self.mixer, self.ffn) if str(p) != "none"]
        return "+".join(parts) or "none"

    @property
    def block(self) -> str:
        """The name of the block kind that implements this layer."""
        if self.mixer is Mixer.ATTENTION and self.ffn is not Ffn.NONE:
            return "layer" if self.ffn is Ffn.DENSE else "moe_layer"
        return f"layer_{self.mixer}_{self.ffn}"

    @property
    def attends(self) -> bool:
        return self.mixer in (Mixer.ATTENTION, Mixer.SLIDING)


DENSE_LAYER = LayerKind(Mixer.ATTENTION, Ffn.DENSE)
MOE_LAYER = LayerKind(Mixer.ATTENTION, Ffn.MOE)

_MIXERS = {str(m): m for m in Mixer if m is not Mixer.NONE}
_FFNS = {str(f): f for f in Ffn if f is not Ffn.NONE}


def parse_kind(token: str, pattern: str = "") -> LayerKind:
    """A kind token (``"swa+moe"``) as a :class:`LayerKind`; a one-line :class:`ConfigError`
    naming the token otherwise."""
    where = f" in layer_pattern {pattern!r}" if pattern else ""
    mixer, ffn = Mixer.NONE, Ffn.NONE
    parts = [p.strip() for p in token.split("+")]
    for part in parts:
        if part in _MIXERS and mixer is Mixer.NONE:
            mixer = _MIXERS[part]
        elif part in _FFNS and ffn is Ffn.NONE:
            ffn = _FFNS[part]
        else:
            raise ConfigError(
                f"layer kind {token!r}{where}: expected at most one mixer of "
                f"{sorted(_MIXERS)} and at most one FFN of {sorted(_FFNS)} joined by '+', "
                f"but got {part!r}"
            )
    if mixer is Mixer.NONE and ffn is Ffn.NONE:
        raise ConfigError(f"layer kind {token!r}{where} has neither a mixer nor an FFN")
    return LayerKind(mixer, ffn)


_TOKEN = re.compile(r"\s*(\(|\)|,|\*\s*\d*|[a-z][a-z0-9_+\s]*[a-z0-9_])\s*")

#: A parsed item: (kinds, repeat); repeat -1 is the open repeat.
_Item = tuple[tuple[LayerKind, ...], int]


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.tokens: list[str] = []
        position = 0
        while position < len(pattern):
            match = _TOKEN.match(pattern, position)
            if not match or match.end() == position:
                raise self.error(f"unexpected text {pattern[position:]!r}")
            self.tokens.append(match.group(1).replace(" ", ""))
            position = match.end()
        self.index = 0

    def error(self, what: str) -> ConfigError:
        return ConfigError(
            f"layer_pattern {self.pattern!r}: {what}; expected comma-separated kinds such as "
            "'attn+moe', groups '( … )', each optionally followed by '*N' or one open '*'"
        )

    def peek(self) -> str:
        return self.tokens[self.index] if self.index < len(self.tokens) else ""

    def items(self, depth: int) -> list[_Item]:
        items = [self.item(depth)]
        while self.peek() == ",":
            self.index += 1
            items.append(self.item(depth))
        return items

    def item(self, depth: int) -> _Item:
        token = self.peek()
        if token == "(":
            self.index += 1
            inner = self.items(depth + 1)
            if self.peek() != ")":
                raise self.error("unclosed '('")
            self.index += 1
            if any(repeat < 0 for _, repeat in inner):
                raise self.error("an open repeat '*' must not be nested in a group")
            kinds = tuple(k for group, repeat in inner for _ in range(repeat) for k in group)
        elif token and token not in ",)" and not token.startswith("*"):
            self.index += 1
            kinds = (parse_kind(token, self.pattern),)
        else:
            raise self.error(f"expected a kind or '(' but got {token or 'the end'!r}")
        repeat = 1
        if self.peek().startswith("*"):
            count = self.peek()[1:]
            self.index += 1
            if not count:
                repeat = -1
            elif int(count) < 1:
                raise self.error(f"a repeat count must be >= 1, but got *{count}")
            else:
                repeat = int(count)
        return kinds, repeat


@functools.lru_cache(maxsize=256)
def expand_pattern(pattern: str, layers: int) -> tuple[LayerKind, ...]:
    """The kind of each of ``layers`` layers (memoised); a one-line :class:`ConfigError` when
    the pattern does not parse or does not cover exactly ``layers`` layers."""
    parser = _Parser(pattern)
    items = parser.items(0)
    if parser.index != len(parser.tokens):
        raise parser.error(f"unexpected {parser.peek()!r}")
    open_items = [kinds for kinds, repeat in items if repeat < 0]
    if len(open_items) > 1:
        raise parser.error("at most one open repeat '*'")
    fixed = sum(len(kinds) * repeat for kinds, repeat in items if repeat > 0)
    if fixed > layers or (not open_items and fixed != layers):
        raise ConfigError(
            f"layer_pattern {pattern!r} lays out {fixed} layers"
            f"{' before its open repeat' if open_items else ''}, but the model has {layers=}"
        )
    result: list[LayerKind] = []
    for kinds, repeat in items:
        if repeat < 0:
            fill = layers - fixed
            result.extend(kinds[i % len(kinds)] for i in range(fill))
        else:
            result.extend(kinds * repeat)
    return tuple(result)


def compress_kinds(kinds: tuple[LayerKind, ...]) -> str:
    """A short pattern for ``kinds``: ``"(a, b)*"`` when they repeat a shorter cycle (cut off
    after the last layer), else run lengths ``"a*3, b*"`` (the last run open);
    :func:`expand_pattern` inverts it."""
    n = len(kinds)
    for period in range(1, n // 2 + 1):
        if all(kinds[i] == kinds[i % period] for i in range(n)):
            cycle = ", ".join(k.token for k in kinds[:period])
            return f"({cycle})*" if period > 1 else f"{cycle}*"
    runs: list[tuple[LayerKind, int]] = []
    for kind in kinds:
        if runs and runs[-1][0] == kind:
            runs[-1] = (kind, runs[-1][1] + 1)
        else:
            runs.append((kind, 1))
    last = len(runs) - 1  # the last run open: the pattern then follows a change of depth
    return ", ".join(
        f"{k.token}*" if i == last else f"{k.token}*{count}" if count > 1 else k.token
        for i, (k, count) in enumerate(runs)
    )


#: Suffix of a decoder layer's block kind that keeps its activations while the run recomputes
#: the others (partial checkpointing: ``ParallelConfig.recompute_num_layers``).
KEPT_SUFFIX = "+kept"


def kept_block_name(name: str) -> str:
    """The block kind of a layer of kind ``name`` that is not recomputed under partial
    checkpointing (:data:`KEPT_SUFFIX`)."""
    return name + KEPT_SUFFIX


def is_kept_block(name: str) -> bool:
    """Whether ``name`` is a decoder layer kept out of a partial recompute."""
    return name.endswith(KEPT_SUFFIX)


#: Suffix of a decoder layer's block kind that is not the first of a group of layers
#: checkpointed as one unit (``ParallelConfig.recompute_method = "uniform"``): it saves nothing
#: across the step (the group keeps only its first layer's input) and re-runs its forward in
#: the backward, inside the group's recompute.
GROUPED_SUFFIX = "+grouped"


def grouped_block_name(name: str) -> str:
    """The block kind of a layer of kind ``name`` after the first of a uniform recompute group
    (:data:`GROUPED_SUFFIX`)."""
    return name + GROUPED_SUFFIX


def is_grouped_block(name: str) -> bool:
    """Whether ``name`` is a decoder layer inside (not first in) a uniform recompute group."""
    return name.endswith(GROUPED_SUFFIX)


def base_block_name(name: str) -> str:
    """``name`` without a partial-recompute suffix (:data:`KEPT_SUFFIX`, :data:`GROUPED_SUFFIX`)."""
    return name.removesuffix(KEPT_SUFFIX).removesuffix(GROUPED_SUFFIX)


def layer_kind_of_block(name: str) -> LayerKind | None:
    """The layer kind a block name implements, or None for embedding, head and serving head."""
    name = base_block_name(name)
    if name == "layer":
        return DENSE_LAYER
    if name == "moe_layer":
        return MOE_LAYER
    if name.startswith("layer_"):
        mixer, _, ffn = name.removeprefix("layer_").partition("_")
        return LayerKind(Mixer(mixer), Ffn(ffn))
    return None


def is_layer_block(name: str) -> bool:
    """Whether ``name`` is a decoder layer's block (recomputed, pattern-laid-out)."""
    return layer_kind_of_block(name) is not None

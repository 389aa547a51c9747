"""Rewrite the golden files from the code: ``python -m tests.regenerate_golden`` (``make golden``).

:data:`GOLDEN` is the registry: one ``(path, function)`` pair per golden file, the function
returning the file's full text. Add a pair to cover a new golden file; review the diff before
committing it.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from tests.core.test_chakra_writer import golden_chakra_dump
from tests.core.test_graph import golden_block_dumps
from tests.core.test_sharding_mlp import golden_mlp_dump
from tests.core.test_trace_golden import CONFIGS, golden_trace_dump
from tests.explore.test_astrasim_inputs import GOLDEN_FILES as ASTRASIM_GOLDEN

CORE = Path(__file__).parent / "core" / "golden"

def _trace_dump(name: str) -> str:
    with tempfile.TemporaryDirectory() as directory:
        return golden_trace_dump(name, Path(directory))


GOLDEN: list[tuple[Path, Callable[[], str]]] = [
    (CORE / "blocks.txt", golden_block_dumps),
    (CORE / "mlp_dp.txt", partial(golden_mlp_dump, "dp")),
    (CORE / "mlp_tp.txt", partial(golden_mlp_dump, "tp")),
    (CORE / "mlp_tpsp.txt", partial(golden_mlp_dump, "tpsp")),
    (CORE / "chakra_small_trace_set.txt", golden_chakra_dump),
]
GOLDEN += [(CORE / f"{name}.txt", partial(_trace_dump, name)) for name in sorted(CONFIGS)]
GOLDEN += ASTRASIM_GOLDEN


def main() -> int:
    for path, render in GOLDEN:
        text = render()
        old = path.read_text() if path.exists() else None
        if text != old:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        status = "unchanged" if text == old else ("written" if old is None else "updated")
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        print(f"{status:9s} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

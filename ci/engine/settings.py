"""What a machine tells the matrix engine through its environment (a runner's settings, not the
matrix's): its own limit per stage command, and the cells a gathering run should not wait for."""
from __future__ import annotations

import os

from ci.engine.workspace import STAGE_TIMEOUT_S

# A machine's own limit per stage command, for a runner slower than the ones the default is set
# for (the act run puts every cell of a workflow on this one machine at once).
TIMEOUT_VARIABLE = "OPFORGE_STAGE_TIMEOUT_S"


# Cells whose CI jobs were left out of a run on purpose (comma-separated CI job ids, cell_slug's;
# the act run covers each toolkit and ONNX Runtime value once): gathering skips them, naming why,
# instead of failing on their missing report.json.
NOT_RUN_VARIABLE = "OPFORGE_CELLS_NOT_RUN"


def cells_not_run() -> set[str]:
    return {cell for cell in os.environ.get(NOT_RUN_VARIABLE, "").split(",") if cell}


def stage_timeout_default() -> int:
    value = os.environ.get(TIMEOUT_VARIABLE, "")
    if not value:
        return STAGE_TIMEOUT_S
    if not value.isdigit() or int(value) <= 0:
        raise SystemExit(f"opforge matrix: {TIMEOUT_VARIABLE}={value!r}: expected a positive whole "
                         f"number of seconds")
    return int(value)


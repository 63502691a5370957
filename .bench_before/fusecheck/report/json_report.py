"""JSON report: everything the table shows plus the policy and the captured graphs' code."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)  # JSON has no inf/nan
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def write_json(data: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(_clean(data), indent=2))

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # models/, kernels/ and tests/ helpers import from the repo root


@pytest.fixture(scope="session", autouse=True)
def _quiet_compile_workers():
    """One compile thread: on 2 cores the worker pool's start-up costs more than it saves."""
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    yield

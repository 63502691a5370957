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


@pytest.fixture
def torch_config_entries():
    """Plant or remove entries of torch's Inductor config (`.setitem(config._config, ...)`, `.delitem`); afterwards
    the config's dict cache is rebuilt from scratch: its dirty-key set would otherwise still name a planted key
    that is gone, and every later compile in the process would fail on it."""
    with pytest.MonkeyPatch.context() as mp:
        yield mp
    from torch._inductor import config
    dirty = getattr(config, "_get_dict_dirty_keys_var", None)
    if dirty is not None:
        dirty.set(None)

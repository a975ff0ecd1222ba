import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """../shared/data beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA

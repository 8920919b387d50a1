"""GPU tests run only with FATHOM_GPU_TESTS=1; then a missing GPU, torch or fathom backend
fails every test instead of skipping it."""

import os

import pytest

ENABLED = os.environ.get("FATHOM_GPU_TESTS") == "1"


def pytest_collection_modifyitems(config, items):
    if ENABLED:
        return
    skip = pytest.mark.skip(reason="GPU tests: set FATHOM_GPU_TESTS=1 on a machine with a GPU")
    for item in items:
        if "tests/gpu" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - a GPU machine has torch
        pytest.fail(f"FATHOM_GPU_TESTS=1 but torch is not importable: {e}")
    if not torch.cuda.is_available():
        pytest.fail("FATHOM_GPU_TESTS=1 but torch sees no CUDA GPU")
    import fathom

    if not fathom.is_available():
        pytest.fail(
            f"FATHOM_GPU_TESTS=1 but fathom's CUDA backend is not: {fathom.unavailable_reason()}"
        )
    return torch

"""The benchmarks' tests join the suite's two lanes: a test marked ``processes`` (it launches processes) is also
``slow``, as tests/conftest.py makes it for the package's tests, so that ``-m "not slow"`` leaves it out."""

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("processes") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)

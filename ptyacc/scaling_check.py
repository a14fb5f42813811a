"""Kept for the old path ``ptyacc.scaling_check``: the check is ``ptyacc.speed.scaling_check``, the
link's measurement ``ptyacc.speed.link_check``; the names this module offered are theirs."""

from ptyacc.speed.link_check import (  # noqa: F401
    LARGE_BUFFER_BYTES,
    LINK_SIZES_BYTES,
    NO_LINK,
    SMALL_BUFFER_BYTES,
    LinkFitError,
    LinkMeasurement,
    fit_link,
    format_link,
    measure_link,
)
from ptyacc.speed.scaling_check import (  # noqa: F401
    OVERHEAD_ITERATIONS,
    CheckRow,
    CheckSamples,
    ExchangeOverhead,
    check_against_launches,
    format_check,
    measure_exchange_overhead,
    run_predict,
    run_side_by_side,
    warm_iterations,
)

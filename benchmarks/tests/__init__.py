"""The tests of the benchmarks' instruments (the scaling model, the operator count)."""

"""Benchmarks: the run on a host's own loopback, statistics, output identity and run config, comparison of
recorded runs, interleaved A/B.
"""

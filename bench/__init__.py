"""Benchmarks: one command each, printing a table and writing JSON plus a plot to bench/results/."""

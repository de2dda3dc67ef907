"""Benchmarks: each module has ``main(argv) -> int`` and measures peers in the same run."""

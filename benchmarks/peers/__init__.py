"""What a user would run instead of asyncnet, beside the benchmarks that measure against it."""

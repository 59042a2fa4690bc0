"""Built-in data sets with verifiable answers, for tests, benchmarks and `task:` configs. No torch at import."""

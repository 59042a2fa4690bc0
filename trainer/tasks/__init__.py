"""Built-in tasks with verifiable answers (for tests, benchmarks and `task:` configs). No torch at import."""

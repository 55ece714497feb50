"""Benchmark tools: the HTTP bench runner, manifests, the reference arm and the bench checkpoint maker."""

"""Benchmark manifests (JSONL) and the scripts that build them."""

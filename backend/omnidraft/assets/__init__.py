"""Pinned downloads: model GGUFs and vocab-only GGUFs (models), the local corpora distillation and benchmarks read."""

"""Offline distillation of a drafter: teacher data, training, export (runs on GPU machines without llama.cpp)."""

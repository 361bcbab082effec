"""Offline distillation of a drafter: data, teacher, train, cut (save/load), export, plot, and the CLI."""

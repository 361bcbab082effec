"""Pinned downloads: model GGUFs and vocab-only GGUFs (models), the local corpora distillation and benchmarks read,
and the prompt sets bench, distill and adapt read (prompts, lang_sets, repo_sets, chat_fresh, stubs, snapshot)."""

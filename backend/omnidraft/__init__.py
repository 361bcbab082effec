"""omnidraft: one small cross-vocabulary drafter for on-device speculative decoding.

Layers, one folder each (docs/ARCHITECTURE.md): llama, vocab -> speculative, assets -> online -> runtime ->
server | trainer -> bench -> distill -> apps; the package's own modules (errors, seq, ...) under them all.
"""

__version__ = "0.1.0"

# libllama is loaded before anything imports numpy.  With a CUDA build on the lent H100 machine's image,
# a process that had imported numpy first died with SIGSEGV in the first model load (llama.cpp's
# print_info, formatting the per-layer head counts); the same build and model load fine in this order
# (docs/DEVICE.md).  CPU builds are not affected.  Tools that run without llama_cpp (the trainer's
# export, llama_build.py before setup) still import.
try:
    import llama_cpp as _llama_cpp  # noqa: F401
except ImportError:
    pass

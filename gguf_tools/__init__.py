"""GGUF tools: ``inspect`` a file, ``quantize`` it with llama.cpp, ``convert`` a Hugging Face
Llama/Qwen2 checkpoint to GGUF, and measure the ``vocab`` overlap of two models.

Import the module you need (``from gguf_tools.convert import convert``); the CLI is ``gguf_tools.cli.main``.
"""

"""omnidraft: one small cross-vocabulary drafter for on-device speculative decoding.

Layers (data flows one way): models -> engine -> vocab_bridge / ngram_cache ->
translator -> verifier -> generator -> server / cli; generator -> records -> trainer.
"""

__version__ = "0.1.0"

"""Speculative decoding: drafters, methods, verifiers, the draft-length policy and predictor, the generator loop."""

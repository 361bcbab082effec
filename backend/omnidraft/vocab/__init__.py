"""Vocabularies: bytes <-> ids (codec), the direct map (bridge), the n-gram cache, the translator, chat templates, text streams."""

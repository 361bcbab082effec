"""The generator factory of a process: one loaded pair, warm-up, policies, hot swap (session)."""

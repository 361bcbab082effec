"""llama.cpp: one model and context (engine), its build and patch, the exactness probe and measurement, the cost model."""

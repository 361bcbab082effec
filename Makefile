# Two commands on a fresh machine:  `make demo`  and  `make test`.
VENV ?= .venv
BIN := $(VENV)/bin
PROMPT ?= Write a Python function that checks whether a number is prime.
# The speed configuration: every matrix in Q4_0 (output head too), so that the small-batch kernel built
# into this project's llama.cpp runs them all; made once from the pinned files (about 30 s).
TARGET ?= qwen2.5-coder-1.5b:q4_0_pure
DRAFT ?= smollm2-135m-d8-qwen:q4_0_pure+fr

.PHONY: setup models demo test bench clean-venv

setup:
	bash scripts/setup/setup.sh

models: setup
	$(BIN)/omnidraft models pull smollm2-135m smollm2-135m-d8-qwen smollm2-135m-d8-qwen:q4_0_pure+fr qwen2.5-coder-0.5b

## demo: set up, fetch the pair, the target alone, then a cross-vocabulary speculative generation
demo: models
	$(BIN)/omnidraft models pull $(TARGET) $(DRAFT)
	@echo "== $(TARGET) alone =="
	$(BIN)/omnidraft generate --chat --max-tokens 160 --target $(TARGET) --draft $(DRAFT) --method target "$(PROMPT)"
	@echo "== the default: prompt lookup first, the 8-layer distilled SmolLM2 otherwise, cost-aware policy: the same text =="
	@echo "   (faster where this machine's measured cost model says drafting pays; where it does not, it runs the target alone)"
	$(BIN)/omnidraft generate --chat --max-tokens 160 --target $(TARGET) --draft $(DRAFT) "$(PROMPT)"

## test: set up (incl. chromium + Android build tools for the app tests), fetch models, run the whole suite
test: models
	bash android_demo/ci_setup.sh $(VENV)
	$(BIN)/omnidraft models pull vocabs qwen2.5-coder-0.5b:q4_0 qwen2.5-coder-0.5b:q4_0_pure
	$(BIN)/python -m pytest -q --durations=30

clean-venv:
	rm -rf $(VENV)

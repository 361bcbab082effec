# Two commands on a fresh machine:  `make demo`  and  `make test`.
VENV ?= .venv
BIN := $(VENV)/bin
PROMPT ?= Write a Python function that checks whether a number is prime.

.PHONY: setup models demo test bench clean-venv

setup:
	bash scripts/setup.sh

models: setup
	$(BIN)/omnidraft models pull smollm2-135m qwen2.5-coder-0.5b

## demo: set up, fetch the default pair, run a cross-vocabulary speculative generation
demo: models
	@echo "== the 8-layer distilled SmolLM2 drafting for Qwen2.5-Coder-0.5B, default cost-aware policy =="
	@echo "   (it drafts only where this machine's measured cost model says speculation pays)"
	$(BIN)/omnidraft generate --chat --max-tokens 160 "$(PROMPT)"
	@echo "== the same request, always drafting up to 3 tokens: same text, acceptance and tokens/target pass =="
	$(BIN)/omnidraft generate --chat --max-tokens 160 --policy fixed -k 3 "$(PROMPT)"

## test: set up (incl. chromium + Android build tools for the app tests), fetch models, run the whole suite
test: models
	bash android_demo/ci_setup.sh $(VENV)
	$(BIN)/omnidraft models pull vocabs qwen2.5-coder-0.5b:q4_0
	$(BIN)/python -m pytest -q

clean-venv:
	rm -rf $(VENV)

# Two commands matter: `make demo` and `make test`. Both bootstrap .venv from
# pyproject.toml when it is missing or older than pyproject.toml.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kto-installed

.PHONY: demo test lint typecheck bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kto demo

lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/mypy shared

test: $(STAMP) lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/kto bench

clean:
	rm -rf $(VENV) .kto build *.egg-info

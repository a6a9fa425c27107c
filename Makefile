# Two commands matter: `make demo` and `make test`. Both bootstrap .venv from
# pyproject.toml when it is missing or older than pyproject.toml.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kto-installed

.PHONY: demo test _test parts lint typecheck bench clean

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

# The whole suite, timed. CI=true requires the real tier; outside CI,
# KTO_SKIP_REAL=1 skips it (and pytest's summary says so).
# The time since `make test` began (venv, builds, lint) is printed in pytest's summary.
test:
	@KTO_MAKE_STARTED=$$(date +%s) $(MAKE) --no-print-directory _test

# Three pytest workers (pytest-xdist), a test file each at a time: the suite mostly
# waits on clusters and brokers (each worker starts its own), so three workers on two
# cores take ~85% of two workers' time (about half the serial time).
_test: $(STAMP) lint parts
	$(BIN)/python -m pytest -q -n 3 --dist loadfile --durations=30

# Kubernetes, the training-operator and the JobSet controller (go build from
# the Go module proxy) and Kafka (jars from Maven Central), built once per
# machine into ~/.cache/kto; a no-op when cached.
# Headless Chromium for the console's browser tests (Debian's chromium and
# chromium-driver), installed with apt-get when missing, whatever the tier.
parts: $(STAMP)
	@$(BIN)/python -m realparts.browser
	@if [ "$$CI" != "true" ] && [ -n "$$KTO_SKIP_REAL" ] && [ "$$KTO_SKIP_REAL" != 0 ]; then \
	  echo "real parts not built: KTO_SKIP_REAL is set"; else $(BIN)/python -m realparts; fi

bench: $(STAMP)
	$(BIN)/kto bench

clean:
	rm -rf $(VENV) .kto build *.egg-info

# ration: `make run` starts both services, `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test proto lint bench soak venv lock clean

# Installs exactly the versions of requirements.lock (a constraints file), so a new release of a
# dependency cannot break a fresh clone; `make lock` re-resolves it from pyproject.toml.
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	exec $(BIN)/ration up

proto: $(STAMP)
	$(BIN)/python -m servicekit.protogen gen/python

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy servicekit budget_service memory_service ration_server ration_client bench tests examples
	$(BIN)/lint-imports --no-cache
	cd proto && ../$(BIN)/buf lint
	@# buf breaking: today's protos against the previous commit's (skipped in a one-commit clone).
	@if prev=$$(git rev-parse --verify --quiet HEAD~1); then \
		echo "buf breaking --against HEAD~1 ($$prev)"; \
		cd proto && ../$(BIN)/buf breaking \
			--against "$$(git rev-parse --path-format=absolute --git-common-dir)#ref=$$prev,subdir=proto"; \
	else \
		echo "buf breaking: skipped, HEAD~1 does not exist (a one-commit clone)"; \
	fi

test: $(STAMP) lint
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m bench

# The soak at full length (make test runs it shortened): SOAK_SECONDS=600 make soak
soak: $(STAMP)
	SOAK_SECONDS=$${SOAK_SECONDS:-180} $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/system/test_soak.py

LOCKENV := build/lockenv
lock:
	rm -rf $(LOCKENV) && $(PYTHON) -m venv $(LOCKENV)
	$(LOCKENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOCKENV)/bin/python -m pip install --quiet -e '.[dev]'
	{ echo "# Exact versions for make venv/test/run (pip constraints); regenerate with make lock."; \
	  $(LOCKENV)/bin/python -m pip freeze --exclude-editable; } > requirements.lock
	rm -rf $(LOCKENV)

clean:
	rm -rf $(VENV) build *.egg-info

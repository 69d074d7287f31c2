# ration: `make run` starts both services, `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test proto lint bench soak venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	exec $(BIN)/ration up

proto: $(STAMP)
	$(BIN)/python -m servicekit.protogen gen/python

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy servicekit budget_service memory_service ration_server ration_client bench tests
	$(BIN)/lint-imports --no-cache

test: $(STAMP) lint
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m bench

# The soak at full length (make test runs it shortened): SOAK_SECONDS=600 make soak
soak: $(STAMP)
	SOAK_SECONDS=$${SOAK_SECONDS:-180} $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/system/test_soak.py

clean:
	rm -rf $(VENV) build *.egg-info

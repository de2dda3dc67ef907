# Two entry points that work from nothing: `make train` (the main job) and `make test`.
# Each creates the virtual environment .venv on first use and installs the pinned versions;
# `make test` adds the tensorflow extra (tensorflow-cpu), so CI runs the TensorFlow tests and examples.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TF_STAMP := $(VENV)/.installed-tensorflow
ARGS ?=

.PHONY: train test bench docs clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,torch,cli]"
	touch $(STAMP)

$(TF_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,torch,cli,tensorflow]"
	touch $(TF_STAMP)

train: $(STAMP)
	$(BIN)/asyncnet train $(ARGS)

# Two pytest-xdist workers (one per core); tests that share a resource stay on one worker
# through xdist_group (--dist loadgroup). `make test ARGS="-n 0"` runs everything in one process.
test: $(TF_STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks all $(ARGS)

docs: $(STAMP)
	$(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) runs site

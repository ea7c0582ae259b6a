# rpevit — the README's commands. Everything runs inside a local virtual environment (.venv).
#   make study [PRESET=smoke]   install, run the preset's grid, write reports/<preset>/
#   make test                   install, run the whole test suite
#   make bench                  throughput benchmarks (numbers for reports, not tests)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PRESET ?= smoke
TORCH_VERSION ?= 2.13.0
TORCHVISION_VERSION ?= 0.28.0
STAMP := $(VENV)/.installed

.PHONY: install study test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install_torch.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	bash scripts/install_torch.sh $(PY) $(TORCH_VERSION) $(TORCHVISION_VERSION)
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

study: $(STAMP)
	$(PY) -m rpevit study $(PRESET) --no-progress

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m rpevit bench data --params smoke,seed001_mnist

clean:
	rm -rf $(VENV) runs

# rpevit — the README's commands. Everything runs inside a local virtual environment (.venv).
#   make study [PRESET=smoke]   install, run the preset's grid, execute the notebooks → reports/<preset>/
#                               (the smoke demo → local/reports/smoke/, with a line on whether it reproduced)
#   make test                   install, run the test suite and every notebook under nbval
#   make check                  lint + the fast tests (no training, subprocesses, Ray or notebooks)
#   make lab                    JupyterLab on the project with the rpevit kernel (saves notebooks/ clean)
#   make bench                  throughput benchmarks (numbers for reports, not tests)
#   make mutation               mutation testing of the numerical core ([tool.mutmut]; reports/bench/mutation.md)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PRESET ?= smoke
TORCH_VERSION ?= 2.13.0
TORCHVISION_VERSION ?= 0.28.0
STAMP := $(VENV)/.installed
LAB_PORT ?= 8888
MUTATION_JOBS ?= 2

.PHONY: install study test check lab bench mutation clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install_torch.sh scripts/setup_lab.sh Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	bash scripts/install_torch.sh $(PY) $(TORCH_VERSION) $(TORCHVISION_VERSION)
	$(PY) -m pip install --quiet -e ".[test]"
	$(PY) -m pip install --quiet -e ".[cluster]" || echo "note: Ray could not be installed here; the --engine ray tests will be skipped"
	bash scripts/setup_lab.sh $(PY)  # kernel, notebook save hook, git clean filter (environment.yml runs it too)
	touch $@

# The smoke demo is reproducible and leaves git clean: one thread (the committed runs used one), its runs,
# kept records, summary and notebooks all under the git-ignored local/ (so neither this nor a later
# `make test` touches the committed reference in reports/smoke/, whose kept records are current), the
# notebooks reporting what the study just trained, then one line on whether this machine reproduced the
# committed top-1 of each run. Any other preset writes its report into reports/<preset>/ as it should.
LOCAL_REPORTS := local/reports
DEMO := $(filter smoke,$(PRESET))
DEMO_ENV := OMP_NUM_THREADS=1 RPEVIT_RUNS=$(CURDIR)/local/runs
study: $(STAMP)
	$(if $(DEMO),$(DEMO_ENV) RPEVIT_REPORTS=$(CURDIR)/$(LOCAL_REPORTS)) $(PY) -m rpevit study $(PRESET) --no-progress
	$(if $(DEMO),$(DEMO_ENV)) $(PY) -m rpevit notebooks $(PRESET) $(if $(DEMO),--reports $(LOCAL_REPORTS) --no-train)
	$(if $(DEMO),$(DEMO_ENV) $(PY) -m rpevit status $(PRESET) --reproduced)

test: $(STAMP)
	$(VENV)/bin/ruff check rpevit analysis campaign tests scripts
	$(VENV)/bin/ruff format --check rpevit analysis campaign tests scripts
	bash scripts/test_side_by_side.sh $(PY)  # the suite and the notebooks under nbval, one core each

check: $(STAMP)
	$(VENV)/bin/ruff check rpevit analysis campaign tests scripts
	$(VENV)/bin/ruff format --check rpevit analysis campaign tests scripts
	$(PY) -m pytest -q -m "not slow" tests

# .jupyter/ holds the project's server config: notebooks under notebooks/ are saved without outputs
lab: $(STAMP)
	JUPYTER_CONFIG_PATH=$(CURDIR)/.jupyter$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH} \
	  $(VENV)/bin/jupyter lab --no-browser --port $(LAB_PORT) --ServerApp.root_dir=$(CURDIR) \
	  --MultiKernelManager.default_kernel_name=rpevit $(if $(filter 0,$(shell id -u)),--allow-root)

bench: $(STAMP)
	$(PY) -m rpevit bench data --params smoke,fashion_mnist
	$(PY) -m rpevit bench attention
	$(PY) -m rpevit bench patches

# Not part of `make test`: mutmut copies rpevit/ and tests/ to mutants/, mutates the files that
# [tool.mutmut] only_mutate names and runs the tests that cover each mutated function. mutants/ is
# the tool's work folder (git-ignored); `mutmut show <name>` prints one mutant's diff.
mutation: $(STAMP)
	$(PY) -m pip install --quiet -e ".[mutation]"
	rm -rf mutants
	OMP_NUM_THREADS=1 $(VENV)/bin/mutmut run --max-children $(MUTATION_JOBS)
	$(PY) scripts/mutation_report.py

clean:
	rm -rf $(VENV) runs

# The two commands of the README:  `make course` (set up, open JupyterLab)  and  `make test` (set up, run every test).
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
PIP    := $(PY) -m pip install -q --disable-pip-version-check --progress-bar off

.PHONY: setup course test test-fast notebooks sync book student bench clean

setup: $(VENV)/.installed

# torch first: tools/torch_install.py prints and runs the pip command for this machine (PyTorch's CPU wheel
# index on Linux without an NVIDIA GPU, unless a local CPU wheel fits; TFM_TORCH_INDEX=cpu|pypi|URL overrides).
$(VENV)/.installed: requirements.txt pyproject.toml tools/torch_install.py
	python3 -m venv $(VENV)
	$(PY) tools/torch_install.py "$(TORCH)" --run
	$(PIP) -r requirements.txt -e .
	touch $@

# No "Jupyter news" pop-up: tools/jupyterlab/overrides.json makes "never fetch news" the default (the setting
# is still the learner's to change), and the server serves no news feed.
LAB_FLAGS := --LabApp.news_url=None --LabApp.app_settings_dir=$(CURDIR)/tools/jupyterlab
course: setup  ## open the course in JupyterLab (--allow-root only when run as root, e.g. in a container)
	$(VENV)/bin/jupyter lab notebooks/ $(LAB_FLAGS) $$([ "$$(id -u)" = 0 ] && echo --allow-root)

test: setup  ## every test: package, notebooks (nbval), book, browser (skips without Chromium)
	$(PY) -m pytest

test-fast: setup  ## package tests only
	$(PY) -m pytest tests -m "not browser and not slow"

sync: setup  ## write each notebook from its py:percent script (keeps outputs)
	$(VENV)/bin/jupytext --sync notebooks/py/*.py

# Stored outputs are CPU outputs (nbval compares them on any machine): chapters execute on the CPU unless told,
# e.g. `make notebooks TFM_DEVICE=cuda` (then expect `device='cuda:0'` in the stored text).
NOTEBOOK_DEVICE := $(if $(TFM_DEVICE),$(TFM_DEVICE),cpu)
notebooks: setup  ## execute every chapter in place (on the CPU unless TFM_DEVICE says otherwise): fresh outputs
	TFM_DEVICE=$(NOTEBOOK_DEVICE) $(PY) -m tfm_lesson.course execute notebooks/[0-9][0-9]_*.ipynb

book: setup  ## build the Jupyter Book into book/_build/html (offline, from the stored outputs)
	$(PY) tools/book.py build

student: setup  ## student copies of every chapter (solutions removed) in student/
	$(PY) -m tfm_lesson.course student --out student

bench: setup  ## benchmarks against torch.nn (BENCHMARKS.md)
	$(PY) tools/bench.py

clean:
	rm -rf $(VENV) book/_build book/notebooks book/_extra student artifacts

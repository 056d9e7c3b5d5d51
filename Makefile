# Two entry points for a fresh machine (Python 3.11 with pip and venv):
#   make demo   the before/after demonstration on verl 0.7.1 and a simulated NPU
#   make test   lint, unit tests, the verl version matrix, real MindSpeed's source and real torch_npu's wheels against the
#               kit (what CI runs), its sessions side by side on every core (scripts/suite.py), each session's log whole
# Environments are built on first use and cached in .cache/ (git-ignored).

PYTHON ?= python3
TOOLS_PINS := nox==2026.10.20 ruff==0.17.5 uv==0.13.8
TOOLS := .cache/tools
TOOLS_STAMP := $(TOOLS)/.pins-$(subst ==,-,$(subst $() ,_,$(TOOLS_PINS)))
NOX := $(TOOLS)/bin/nox

.PHONY: test demo bench envs mutations

test: $(TOOLS_STAMP)
	$(TOOLS)/bin/python scripts/suite.py

demo: $(TOOLS_STAMP)
	@$(NOX) --no-color -s demo

bench: $(TOOLS_STAMP)
	$(NOX) -s bench

mutations: $(TOOLS_STAMP)
	$(NOX) -s mutations

envs: $(TOOLS_STAMP)
	$(NOX) -s build_envs

$(TOOLS_STAMP):
	rm -rf $(TOOLS)
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install -q --disable-pip-version-check $(TOOLS_PINS)
	touch $@

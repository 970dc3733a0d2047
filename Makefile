# The kit's two commands:  make lab  (open the course)  and  make test  (run every test).
# Both create .venv/ with the Python found below and install the kit into it first.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.echoq-installed
HOST   := 127.0.0.1
PORT   ?= 8888
# JupyterLab refuses to run as root unless told it may.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: setup lab test docs lint bench clean present dashboard hub shared-env binder-link binder-badge

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# uv installs what pip would, from PyPI, in a fraction of the time (10 s against 41 s on
	@# 2 cores). It byte-compiles every module once, on both cores, here: left to the first
	@# import, each of the processes a test run starts at once (pytest's workers, the site build,
	@# Jupyter servers, kernels) compiled the same modules again, and a fresh clone's collection
	@# took 32 s instead of 5. Where uv cannot be had or cannot reach the index, pip does the
	@# same install (and compiles too).
	$(BIN)/python -m pip install -q --disable-pip-version-check uv \
	  && $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[teaching,test,docs]' \
	  || $(BIN)/python -m pip install -q --disable-pip-version-check -e '.[teaching,test,docs]'
	@# jsonschema imports rfc3987-syntax (pulled in by jupyter-events) whenever it is there, and its
	@# import builds 38 Lark grammars: 1.8 s of CPU in every Jupyter server, Voila and pytest
	@# process, for two formats (iri, iri-reference) nothing here validates. Without it jsonschema
	@# leaves those two unchecked.
	$(BIN)/python -m pip uninstall -q -y --disable-pip-version-check rfc3987-syntax
	@# Every JupyterLab page load asks its server whether the app needs a rebuild, which the server
	@# works out from every extension's files (about 0.7 s of CPU a page, per learner on a class
	@# server). The kit's extensions come prebuilt from PyPI, so nothing is ever rebuilt: the
	@# check is off in this venv.
	@mkdir -p $(VENV)/etc/jupyter/labconfig
	@echo '{"buildCheck": false, "buildAvailable": false}' > $(VENV)/etc/jupyter/labconfig/page_config.json
	@touch $@

lab: setup
	$(BIN)/jupyter lab --no-browser $(ROOT_FLAG) --ServerApp.ip=$(HOST) --port=$(PORT) \
	  --ServerApp.root_dir=notebooks --LabApp.default_url=/lab/tree/00_start_here.ipynb

# The lab panels as a web page without code, for projecting in class (Voila; loopback only).
PRESENT_PORT ?= 8866
present: setup
	$(BIN)/voila notebooks/present.ipynb --no-browser --Voila.ip=$(HOST) --port=$(PRESENT_PORT)

# The instructor's dashboard of a workshop (python -m echoq.teaching workshop up), with Voila on loopback.
# ECHOQ_WORKSHOP is the folder `workshop up` wrote (default ./echoq-workshop). The page holds the
# class's produce and kill buttons: Voila generates a token (--token) and prints the URL with it;
# any other local user without it gets the login page.
DASHBOARD_PORT ?= 8867
ECHOQ_WORKSHOP ?= echoq-workshop
dashboard: setup
	@echo "the dashboard needs its token: open the URL Voila prints below (http://$(HOST):$(DASHBOARD_PORT)/?token=...)"
	ECHOQ_WORKSHOP=$(abspath $(ECHOQ_WORKSHOP)) $(BIN)/voila notebooks/dashboard.ipynb --no-browser \
	  --Voila.ip=$(HOST) --port=$(DASHBOARD_PORT) --token

# JupyterHub for the class on this machine, offline (docs/WORKSHOP.md): the hub from the
# project's extras, configurable-http-proxy from npm into build/hub. Ctrl-C stops it.
# Learners' servers run LEARNER_PYTHON: given, else the shared environment's when
# `make shared-env` made one, else this venv's (which the hub first tries as a learner).
HUB_PORT ?= 8000
SHARED_ENV ?= /opt/echoq
LEARNER_PYTHON ?= $(wildcard $(SHARED_ENV)/venv/bin/python)
hub: setup
	@bash tools/hub-deps.sh
	ECHOQ_WORKSHOP=$(abspath $(ECHOQ_WORKSHOP)) $(BIN)/python -m echoq.teaching workshop hub --port $(HUB_PORT) \
	  $(if $(LEARNER_PYTHON),--learner-python $(LEARNER_PYTHON),)

# The kit where every learner's Unix user can run it, for `make hub` (tools/shared-env.sh).
shared-env: setup
	@bash tools/shared-env.sh $(SHARED_ENV)

# This repository's Binder link, from its git remote (REMOTE=... to use another address);
# binder-badge also writes the badge into the README.
binder-link:
	@$(PYTHON) tools/binder_link.py $(if $(REMOTE),--remote $(REMOTE),)
binder-badge:
	@$(PYTHON) tools/binder_link.py --write-readme $(if $(REMOTE),--remote $(REMOTE),)

# The course and the manual as a static site in build/site (open build/site/index.html; no server
# needed, search included), built offline and strictly: a broken link or a missing page fails.
# mkdocs.yml says how; tools/site_hooks.py assembles the pages into build/site-src first.
docs: setup
	@mkdir -p build/site-src
	@# Not --quiet: it drops mkdocs' warnings before --strict counts them, so a broken link would pass.
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Every test (docs/TESTING.md): ruff, the strict site build, the browser tests and all the
# others, sharing the cores; tools/run-tests.sh says how.
test: setup
	@bash tools/run-tests.sh

lint: setup
	$(BIN)/ruff check echoq tests bench tools conftest.py

bench: setup
	$(BIN)/python bench/throughput.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis

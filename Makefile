# tpu-trainer. `make help` lists the targets and their variables. Each target is one
# `invoke from-make TASK` call, given the variables of make's command line as they are;
# tasks.py maps them through the settings table (`invoke settings`), so no variable is
# listed here. The only rule that is not an invoke call creates the virtualenv that invoke
# itself lives in (on first use, and again when the pins change).

PAIR   ?= 2.9
VENV   ?= .venv
PYTHON ?= python3
INVOKE := $(VENV)/bin/invoke
SETUP  := $(VENV)/.installed-$(PAIR)

# `--var 'NAME=VALUE'` for each variable set on make's command line except make's own
# (PAIR, VENV, PYTHON); single quotes in a value survive the shell.
quote = '$(subst ','\'',$(1))'
GIVEN = $(strip $(foreach v,$(filter-out PAIR VENV PYTHON,$(.VARIABLES)),$(if $(filter command line,$(origin $(v))),--var $(call quote,$(v)=$($(v))))))

.DEFAULT_GOAL := help
.PHONY: help setup settings train tokenize test env bench

help: ## list the targets and the variables each takes
	@$(PYTHON) -m tooling.tasks.variables $(firstword $(MAKEFILE_LIST))

$(SETUP): pyproject.toml env/constraints-$(PAIR).txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --constraint env/constraints-$(PAIR).txt --editable '.[dev]'
	touch $@

setup: $(SETUP) ## create .venv with the pinned torch/torch_xla pair PAIR (default: env/versions.yaml's) and the project

settings: $(SETUP) ## every variable in every spelling: make, invoke/CLI flag, Trainer keyword, config key
	$(INVOKE) from-make settings $(GIVEN)

train: $(SETUP) ## train a job on XLA (default: an MLP on the 8x8 digits; CONFIG=job.yaml for yours)
	$(INVOKE) from-make train $(GIVEN)

tokenize: $(SETUP) ## tokenize a text corpus into token shards for a job's data: section (INPUT=DIR OUT=DIR|gs://...)
	$(INVOKE) from-make tokenize $(GIVEN)

test: $(SETUP) ## run the tests on CPU-emulated XLA (all but the image tests)
	$(INVOKE) from-make test $(GIVEN)

bench: $(SETUP) ## engine vs a hand-written torch_xla loop, 1 device and SPMD x8 (figures, not pass/fail)
	$(INVOKE) from-make bench $(GIVEN)

env: $(SETUP) ## print the exports train would set, for `eval "$(make -s env DEVICES=8)"`
	$(INVOKE) from-make env $(GIVEN)

# ---- images (Docker SDK; needs a daemon: `sudo ci/start-dockerd.sh`). Offline machines:
# `make base-image`, then BASE_IMAGE=tpu-trainer-base:3.11-bookworm; behind a TLS proxy,
# CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt.
.PHONY: image test-image push base-image matrix

image: $(SETUP) ## build tpu-trainer:VERSION (default: env/versions.yaml's pair) via the Docker SDK
	$(INVOKE) from-make build $(GIVEN)

test-image: $(SETUP) ## build the default image, then run the Docker tests (real daemon, real registry)
	$(INVOKE) from-make test-image $(GIVEN)

push: $(SETUP) ## push tpu-trainer:VERSION and its immutable tag, verified by digest (password in $REGISTRY_PASSWORD)
	$(INVOKE) from-make push $(GIVEN)

base-image: $(SETUP) ## make tpu-trainer-base:3.11-bookworm offline (debootstrap + docker import; root)
	$(INVOKE) from-make base-image $(GIVEN)

matrix: $(SETUP) ## every pair x DEVICES {1,8} x PRECISION {fp32,bf16} in its image, as a pass/fail table
	$(INVOKE) from-make matrix $(GIVEN)

.PHONY: pod tpu-clean

pod: $(SETUP) ## train on every pod worker: TPU=name ZONE=z or HOSTS=h1,h2; ARGS="--max-epochs 3"
	$(INVOKE) from-make pod $(GIVEN)

tpu-clean: $(SETUP) ## stop leftover processes holding the TPU, here or on every worker of TPU=name / HOSTS=h1,h2
	$(INVOKE) from-make tpu-clean $(GIVEN)

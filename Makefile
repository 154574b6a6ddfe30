# tpu-trainer. `make help` lists the targets. Each target is one `invoke` call; the logic
# lives in tasks.py. The only rule here that is not an invoke call creates the virtualenv
# that invoke itself lives in (on first use, and again when the pins change).

PAIR   ?= 2.9
VENV   ?= .venv
PYTHON ?= python3
INVOKE := $(VENV)/bin/invoke
SETUP  := $(VENV)/.installed-$(PAIR)

.DEFAULT_GOAL := help
.PHONY: help setup train test env bench

help: ## list the targets and their variables
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /  \1\t/' | expand -t 18

$(SETUP): pyproject.toml env/constraints-$(PAIR).txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --constraint env/constraints-$(PAIR).txt --editable '.[dev]'
	touch $@

setup: $(SETUP) ## create .venv with the pinned torch/torch_xla pair (PAIR=2.9) and the project

train: $(SETUP) ## train the default job: CORES=1|8|auto|[5] PRECISION=fp32|bf16|bf16-true STRATEGY=data|fsdp MESH=data:2,fsdp:4 EPOCHS=N MAX_STEPS=N ACCUMULATE=N CLIP=1.0 RUN_DIR=DIR|gs://BUCKET/PATH CONFIG=job.yaml PROFILE=cpu|tpu-vm RESUME=auto|FILE DEBUG=1 ARGS="--set k=v"
	$(INVOKE) train --from-make $(if $(CORES),--cores '$(CORES)') $(if $(STRATEGY),--strategy '$(STRATEGY)') $(if $(MESH),--mesh '$(MESH)') $(if $(PRECISION),--precision '$(PRECISION)') $(if $(EPOCHS),--epochs '$(EPOCHS)') $(if $(RUN_DIR),--run-dir '$(RUN_DIR)') $(if $(CONFIG),--config '$(CONFIG)') $(if $(PROFILE),--profile '$(PROFILE)') $(if $(ARGS),--args '$(ARGS)') $(if $(RESUME),--resume '$(RESUME)') $(if $(DEBUG),--debug) $(if $(ACCUMULATE),--accumulate '$(ACCUMULATE)') $(if $(MAX_STEPS),--max-steps '$(MAX_STEPS)') $(if $(CLIP),--clip '$(CLIP)')

test: $(SETUP) ## run the tests on CPU-emulated XLA (all but the image tests)
	$(INVOKE) test

bench: $(SETUP) ## engine vs a hand-written torch_xla loop, 1 device and SPMD x8 (figures, not pass/fail): ROUNDS=3 OUT=dir
	$(INVOKE) bench $(if $(ROUNDS),--rounds '$(ROUNDS)') $(if $(OUT),--out '$(OUT)')

env: $(SETUP) ## print a profile's exports for `eval`: PROFILE=cpu|tpu-vm|xrt-tpu-vm|xrt-tpu-node CORES=N
	$(INVOKE) env --profile '$(or $(PROFILE),cpu)' $(if $(CORES),--cores '$(CORES)')

# ---- images (Docker SDK; needs a daemon: `sudo ci/start-dockerd.sh`). Offline machines:
# `make base-image`, then BASE_IMAGE=tpu-trainer-base:3.11-bookworm; behind a TLS proxy,
# CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt.
.PHONY: image test-image push base-image matrix

image: $(SETUP) ## build tpu-trainer:VERSION (default 2.9) via the Docker SDK: VERSION=2.8 BASE_IMAGE=name:tag CA_BUNDLE=pem
	$(INVOKE) build $(if $(VERSION),--version '$(VERSION)') $(if $(BASE_IMAGE),--base-image '$(BASE_IMAGE)') $(if $(CA_BUNDLE),--ca-bundle '$(CA_BUNDLE)')

test-image: $(SETUP) ## build the default image, then run the Docker tests (real daemon, real registry): BASE_IMAGE=… CA_BUNDLE=…
	$(INVOKE) test-image $(if $(BASE_IMAGE),--base-image '$(BASE_IMAGE)') $(if $(CA_BUNDLE),--ca-bundle '$(CA_BUNDLE)')

push: $(SETUP) ## push tpu-trainer:VERSION and its immutable tag, verified by digest: REGISTRY=host:port [REGISTRY_USER=u, password in $REGISTRY_PASSWORD]
	$(INVOKE) push --registry '$(REGISTRY)' $(if $(VERSION),--version '$(VERSION)') $(if $(REGISTRY_USER),--username '$(REGISTRY_USER)')

base-image: $(SETUP) ## make tpu-trainer-base:3.11-bookworm offline (debootstrap + docker import; root)
	$(INVOKE) base-image

matrix: $(SETUP) ## every pair x CORES {1,8} x PRECISION {fp32,bf16} in its image, as a pass/fail table: EPOCHS=N VERSIONS=2.9,2.8
	$(INVOKE) matrix $(if $(EPOCHS),--max-epochs '$(EPOCHS)') $(if $(VERSIONS),--versions '$(VERSIONS)')

.PHONY: pod tpu-clean

pod: $(SETUP) ## train on every pod worker: TPU=name ZONE=z [PROJECT=p WORKERS=n ACCELERATOR_TYPE=v4-32] or HOSTS=h1,h2; IMAGE=tag|none SETUP_SCRIPT=f SHM_SIZE=16g DRY_RUN=1 ARGS="--max-epochs 3"
	$(INVOKE) pod $(if $(TPU),--tpu '$(TPU)') $(if $(ZONE),--zone '$(ZONE)') $(if $(PROJECT),--project '$(PROJECT)') $(if $(WORKERS),--workers '$(WORKERS)') $(if $(ACCELERATOR_TYPE),--accelerator-type '$(ACCELERATOR_TYPE)') $(if $(HOSTS),--hosts '$(HOSTS)') $(if $(IMAGE),--image '$(IMAGE)') $(if $(SETUP_SCRIPT),--setup '$(SETUP_SCRIPT)') $(if $(SHM_SIZE),--shm-size '$(SHM_SIZE)') $(if $(DRY_RUN),--dry-run) -- $(ARGS)

tpu-clean: $(SETUP) ## stop leftover processes holding the TPU, here or on every worker of TPU=name ZONE=z / HOSTS=h1,h2
	$(INVOKE) tpu-clean $(if $(TPU),--tpu '$(TPU)') $(if $(ZONE),--zone '$(ZONE)') $(if $(PROJECT),--project '$(PROJECT)') $(if $(HOSTS),--hosts '$(HOSTS)')

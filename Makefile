# One entry point for contributors. The README's two commands are `make lab` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
VENV := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: help lab-free deps caches lint sanity unit integration integration-day2 integration-upgrade molecule lab-test release-check docs test lab lab-down bench

help: ## list the targets and what each does
	@awk -F':.*## ' '/^[a-z][a-z0-9-]*:.*## /{printf "  %-22s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

deps: ## apt packages, the pinned venv, dependency collections, the in-place collection link
	bash scripts/bootstrap.sh

caches: deps ## build once what the tiers share: wheelhouse, CPU vLLM venvs, tiny model, node image
	bash scripts/build_caches.sh

lint: deps ## ansible-lint, production profile
	ansible-lint --profile production

sanity: deps ## ansible-test sanity on a copy laid out as ansible_collections/pairserve/llm
	bash scripts/sanity.sh

unit: deps ## fast tests: modules through Ansible over recorded NVML, rendering, parsing
	bash scripts/pytest.sh -n auto --dist loadfile tests/unit

integration: deps ## tests against real services started by the suite (hub, GPUStack, PostgreSQL, vLLM CPU); three sessions side by side, building their caches
	bash scripts/integration.sh

integration-day2: caches ## the day-2 plays against GPUStack alone (also part of `make integration`)
	bash scripts/pytest.sh -m day2 tests/integration/gpustack/test_day2.py

integration-upgrade: caches ## GPUStack 2.2.3 -> 2.3.0 on one database: data, keys, module idempotence (out of `make test`)
	bash scripts/pytest.sh -m upgrade tests/integration/gpustack/test_upgrade_230.py

lab-test: deps ## the lab end to end: up (figures), the idempotence proof, the testinfra suite against it, down, nothing left behind
	.venv/bin/python -m lab test

molecule: deps ## every molecule scenario in podman containers (default = the control plane alone, private network)
	bash scripts/build_caches.sh gpustack
	bash scripts/molecule.sh

release-check: deps ## build + install the tarball, ansible-doc, a play from the installed copy, EE, changelog, docs freshness
	bash scripts/release_check.sh

docs: deps ## regenerate docs/reference/ from argument_specs and module documentation
	.venv/bin/python scripts/gen_docs.py

# The lab test runs the default testinfra suite (lab/scenarios/default/tests) against the lab, a superset of molecule/default (same node
# image, inventory and control-plane play, plus serving), so CI does not converge the control plane twice.
test: lab-free deps ## the whole test suite (what CI runs): lint sanity unit integration lab-test release-check, the caches built beside lint and sanity
	bash scripts/test.sh

# The lab tier brings up a lab of its own from fresh nodes (its first step is check mode on them): a lab left up by
# `make lab` is refused here, in the first second, instead of after the other tiers' half hour.
lab-free: ## refuse at once when a lab from `make lab` is up (make test needs fresh nodes; run `make lab-down`)
	@if podman container exists pairserve-lab-node-a 2>/dev/null || podman container exists pairserve-lab-node-b 2>/dev/null \
	    || [ -e .lab/converge-1.log ]; then \
	  echo "make test: the lab from \`make lab\` is up, and the lab tier starts from fresh nodes: run \`make lab-down\` first (it removes the lab; the caches stay)" >&2; \
	  exit 1; \
	fi

lab: deps ## the main job on its embedded default: the local lab
	.venv/bin/python -m lab up

bench: caches ## the instrument: the bench play's measurement against `vllm bench serve` on one CPU vLLM
	.venv/bin/python benchmarks/bench_vs_vllm_bench.py

lab-down: deps ## tear the lab down
	.venv/bin/python -m lab down

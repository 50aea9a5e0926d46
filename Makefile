# The two README commands: `make demo` (main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
PACKAGES := nativedra dra_driver cdi extender e2e hardware testkit tools
# A real node needs root (kubelet, containerd, mknod); elsewhere its tests skip and say why.
REAL_NODE_BUILD := $(if $(filter 0,$(shell id -u)),--real-node --image-source .,)

.PHONY: demo test check lint unit e2e bench soak venv clean down protos image test-matrix test-gpu gpu-wheels lock upgrade

# Exactly the lock (requirements/dev.txt, hashed): nothing is resolved at install time, and a venv
# left from an older lock is made anew rather than patched. The package itself goes in last, built by
# the locked setuptools. tools.lock --installed then fails unless the venv holds the lock and only it.
PIP_INSTALL := $(BIN)/pip install --quiet --disable-pip-version-check --no-deps
venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/dev.txt
	@echo "nativedra: installing the locked dependencies into $(VENV) (first run only, about a minute)"
	@$(PYTHON) -m venv --clear $(VENV)
	@$(PIP_INSTALL) --require-hashes -r requirements/dev.txt
	@$(PIP_INSTALL) --no-build-isolation -e .
	@$(BIN)/python -m tools.lock --installed
	@touch $@

# The lock written again after pyproject.toml changed (pins kept where they still fit); `make upgrade`
# moves every pin to the newest version pyproject.toml allows. Either lands once `make test` passes.
# The venv's own check may refuse the lock being replaced (a dependency left pyproject.toml), not uv.
lock upgrade:
	-@$(MAKE) --no-print-directory venv
	$(BIN)/python -m tools.lock $(if $(filter upgrade,$@),--upgrade,)

demo: venv
	$(BIN)/nativedra demo

down: venv
	$(BIN)/nativedra cluster down

lint: venv
	$(BIN)/python -m tools.lock --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(PACKAGES) tests bench
	$(BIN)/hadolint Dockerfile
	$(BIN)/lint-imports
	$(BIN)/python -m tools.docs_pages --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site

unit: venv
	$(BIN)/pytest tests $(PYTEST_ARGS)

e2e: venv
	$(BIN)/pytest e2e $(PYTEST_ARGS)

# Lint, types and generated-code freshness first (seconds), then the Kubernetes binaries, the
# add-on controllers, helm, the real node's kubelet, containerd and this tree's image (built once and
# cached, outside any test timeout), then every unit and e2e test in one pytest run.
test: lint
	$(BIN)/python -m dra_driver.proto.generate --check
	$(BIN)/nativedra cluster build --with jobset,lws,kueue --helm $(REAL_NODE_BUILD) >/dev/null
	$(BIN)/pytest -ra --durations=25 $(PYTEST_ARGS)

# The edit-test loop (warm: binaries cached): lint, types, every unit test and one end-to-end test
# through the real kube-scheduler and the extender's own process. `make test` stays the whole suite.
SMOKE_E2E ?= e2e/test_extender.py::test_fast_path_and_malformed_calls
check: lint
	$(BIN)/nativedra cluster build >/dev/null
	$(BIN)/pytest -q -x tests $(SMOKE_E2E) $(PYTEST_ARGS)

# The image of this tree, built with podman (on a Debian base built locally when no registry answers).
image: venv
	$(BIN)/nativedra cluster image .

protos: venv
	$(BIN)/python -m dra_driver.proto.generate

bench: venv
	$(BIN)/python -m bench

# 10 minutes of churn with the extender and a plugin SIGKILLed twice each (CI runs a 90 s one).
soak: venv
	$(BIN)/nativedra cluster build >/dev/null
	$(BIN)/python -m tools.soak --seconds 600

# The plugin and extender e2e on 1.34, 1.35, 1.36, 1.37 and 1.38.0-beta.0, each with its default
# feature gates, and a per-version summary (not in CI: builds each release once, about 5 minutes each
# on 2 cores, 1.38 with the Go 1.27 toolchain its go.mod names, which the go command fetches; then
# 2-3 minutes of tests per release on 1.36-1.38, 4-8 on 1.34/1.35 where partition tests time out).
MATRIX_VERSIONS ?= v1.34.4,v1.35.4,v1.36.2,v1.37.2,v1.38.0-beta.0
test-matrix: venv
	$(BIN)/python -m tools.matrix --versions $(MATRIX_VERSIONS) -- $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# On a machine with an NVIDIA GPU (not in CI): the nvml backend against nvidia-smi and sysfs, the
# shipped profile of its model, health events and CDI device nodes; read-only. Writes a recording
# of its NVML answers under gpu-report/ (commit it to tests/dra_driver/discovery/data/).
test-gpu: venv
	$(BIN)/python -m hardware.record gpu-report
	$(BIN)/pytest -ra hardware

# Wheels of the pinned runtime dependencies for a GPU machine without a registry (hardware/run_on_gpu.sh).
gpu-wheels: venv
	$(BIN)/python -m hardware.wheels .gpu-wheels 3.12

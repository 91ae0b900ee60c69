# The two newcomer commands (see README): `make demo` and `make test`. Both set up a fresh machine first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
export REQUIRE_DOCKER ?= 1

.PHONY: host venv base base-arm64 demo test lint clean

host:
	./scripts/setup-host.sh

# Two stamps: the demo needs the tool and matplotlib only; the tests add their tools, the SBOM/signing
# libraries (attest) and torch (CPU build).
$(VENV)/.demo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[plot]'
	touch $@

$(VENV)/.installed: $(VENV)/.demo
	$(PY) -m pip install -q -e '.[test,attest,torch]'
	touch $@

venv: $(VENV)/.installed

base: host $(VENV)/.demo
	$(PY) build.py base
	$(PY) build.py base --layout dlc
	$(PY) build.py base --layout al2023-standin

# The arm64 twin's base for the tests (not the demo's), where setup-host could enable qemu's arm64 emulation
# (else its test skips, or fails under CI=true).
base-arm64: base
	@if [ "$$(head -n1 /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null)" = enabled ]; then \
	  $(PY) build.py base --platform linux/arm64; \
	else echo "make base: no arm64 emulation on this host; the arm64 base is not made"; fi

# The source mirror beside the project when there is one (CI has ../shared/mirror): the demo takes the git
# sources (aws-ofi-nccl, nccl-tests, GDRCopy) from the artifact cache, then the mirror, then upstream.
MIRROR ?= $(wildcard ../shared/mirror)

# The main job on the embedded default: build the local matrix for real, check every image, show the report.
demo: base
	$(PY) build.py demo --matrix matrix.local.yaml $(if $(MIRROR),--mirror $(MIRROR))

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: venv base base-arm64 lint
	$(VENV)/bin/pytest -q

clean:
	rm -rf build .cache/artifacts

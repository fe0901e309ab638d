# Magnetar: `make run` starts a standalone server; `make test` proves everything.
# Both set up what they need: a venv in .venv, Python deps from pyproject.toml, and
# (for tests) ZooKeeper and a JDK from Debian packages when they are missing.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP_SERVER := $(VENV)/.stamp-server
STAMP_ALL := $(VENV)/.stamp-all
ZK_JAR := /usr/share/java/zookeeper.jar
DATA_DIR ?= data/standalone
PROTO_OUT := build/proto-check
PYTEST_ARGS ?=

.PHONY: run test venv venv-all system-deps docker-deps azurite image proto proto-check lint typecheck imports unit bench clean

run: $(STAMP_SERVER)
	@echo "Starting Magnetar standalone: service URL pulsar://localhost:6650, admin URL http://localhost:8080"
	$(VENV)/bin/magnetar standalone --data-dir $(DATA_DIR)

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel

$(STAMP_SERVER): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[server]'
	@touch $@

$(STAMP_ALL): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[server,spark,dev,cli]'
	@touch $@ $(STAMP_SERVER)

venv: $(STAMP_SERVER)
venv-all: $(STAMP_ALL)

# ZooKeeper (real server for the contract/integration tiers) and Java, from Debian.
system-deps:
	@if [ ! -f $(ZK_JAR) ] || ! command -v java >/dev/null 2>&1; then \
	  echo "Installing ZooKeeper and a JDK from Debian packages"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends zookeeper default-jre-headless >/dev/null; \
	fi
	@test -f $(ZK_JAR) && command -v java >/dev/null && echo "ZooKeeper and Java: present"

# The deploy tier's engine: Debian's docker.io, debootstrap and docker-compose (1.29) when
# missing, and dockerd started by hand (no bridge, no iptables: host networking only) when
# it is not running. Idempotent.
docker-deps:
	@if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1 \
	   || ! command -v docker-compose >/dev/null 2>&1; then \
	  echo "Installing docker.io, debootstrap and docker-compose from Debian packages"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends \
	    docker.io debootstrap docker-compose >/dev/null; \
	fi
	@if ! docker info >/dev/null 2>&1; then \
	  echo "Starting dockerd (log: /var/log/dockerd-magnetar.log)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO sh -c 'nohup dockerd --bridge=none --iptables=false --ip6tables=false \
	    >>/var/log/dockerd-magnetar.log 2>&1 &'; \
	  for i in $$(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done; \
	fi
	@docker info >/dev/null 2>&1 && echo "Docker engine: running"

# Azurite, Microsoft's Azure Blob Storage emulator (the Azure offload tests' real server), from
# the npm registry with the machine's Node.js into .deps/azurite. Idempotent.
AZURITE := .deps/azurite/node_modules/.bin/azurite-blob
azurite: $(AZURITE)
$(AZURITE):
	@command -v npm >/dev/null 2>&1 || { echo "npm not found: install Node.js (20+) and npm"; exit 1; }
	npm install --silent --no-audit --no-fund --prefix .deps/azurite azurite@3
	@test -x $@ && echo "Azurite: installed"

# magnetar and magnetar-zookeeper images (the Debian base is made once, then reused).
image: $(STAMP_SERVER) docker-deps
	PYTHON=$(PY) deploy/build-images.sh

# The deploy tier uses the images just built (MAGNETAR_TEST_IMAGES_BUILT: no second build).
test: $(STAMP_ALL) system-deps docker-deps azurite image proto-check lint typecheck imports
	MAGNETAR_TEST_IMAGES_BUILT=1 $(PY) -m pytest --durations=60 $(PYTEST_ARGS)

unit: $(STAMP_ALL)
	$(PY) -m pytest -m "unit or contract" $(PYTEST_ARGS)

# Regenerate protobuf / gRPC code from our .proto files.
proto: $(STAMP_ALL)
	$(PY) tools/gen_proto.py .

# CI fails when committed generated code is stale.
proto-check: $(STAMP_ALL)
	@rm -rf $(PROTO_OUT) && mkdir -p $(PROTO_OUT)
	@$(PY) tools/gen_proto.py $(PROTO_OUT) --check .

lint: $(STAMP_ALL)
	$(VENV)/bin/ruff check .

typecheck: $(STAMP_ALL)
	$(VENV)/bin/mypy magnetar

imports: $(STAMP_ALL)
	$(VENV)/bin/lint-imports --no-cache

bench: $(STAMP_ALL)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .deps build .mypy_cache .ruff_cache .pytest_cache .import_linter_cache

#!/bin/bash
# Build the magnetar and magnetar-zookeeper images (`make image`), on a fresh machine too.
#
# 1. A Docker engine: Debian's docker.io when `dockerd` is missing; dockerd started by hand
#    (no bridge, no iptables: containers use host networking only) when it is not running.
# 2. The project wheel and its server dependencies' wheels, made on the host (the
#    dependencies in the background while step 3 runs; reused while the lists are unchanged).
# 3. The base image magnetar-base:bookworm, made ONCE with debootstrap (minbase + python3)
#    and `docker import`; reused by later builds.
# 4. `docker build --network host` of both images, side by side (layers are cached: a rebuild after a code change only
#    reinstalls the wheel).
# Environment: PYTHON (the venv's python), TAG (default latest), MIRROR (Debian mirror).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
TAG="${TAG:-latest}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
BASE=magnetar-base:bookworm
SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
log() { echo "[image] ${SECONDS}s: $*" >&2; }

apt_install() {
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "$@" >/dev/null
}

# -- 1. the engine ------------------------------------------------------------------------
if ! command -v dockerd >/dev/null 2>&1; then
  log "installing docker.io from Debian"
  apt_install docker.io
fi
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (no bridge, no iptables; log in /var/log/dockerd-magnetar.log)"
  $SUDO sh -c 'nohup dockerd --bridge=none --iptables=false --ip6tables=false \
    >>/var/log/dockerd-magnetar.log 2>&1 &'
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not start"; tail -20 /var/log/dockerd-magnetar.log; exit 1; }
fi

# -- 2. the wheels (in the background while the base is made) ---------------------------
# Every wheel is made on the host (its pip reaches PyPI and caches): the image build needs
# no index. The dependency wheels are the same files from run to run, so their layer stays
# cached; only the project's wheel changes.
ctx=build/image
rm -rf "$ctx/wheels" && mkdir -p "$ctx/wheels" "$ctx/deps"
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$ctx/wheels" . >/dev/null
"$PYTHON" - > "$ctx/requirements.txt.new" <<'PY'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for req in [*project["dependencies"], *project["optional-dependencies"]["server"]]:
    print(req)
PY
wheels_pid=
if ! cmp -s "$ctx/requirements.txt.new" "$ctx/requirements.txt" || [ ! -f "$ctx/deps.done" ]; then
  log "collecting the server dependencies' wheels"
  rm -rf "$ctx/deps" "$ctx/deps.done" && mkdir -p "$ctx/deps"
  mv "$ctx/requirements.txt.new" "$ctx/requirements.txt"
  ( "$PYTHON" -m pip wheel -q -r "$ctx/requirements.txt" -w "$ctx/deps" >/dev/null 2>&1 \
      && touch "$ctx/deps.done" ) &
  wheels_pid=$!
else
  rm -f "$ctx/requirements.txt.new"
fi
# -- 3. the base --------------------------------------------------------------------------
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null 2>&1 || { log "installing debootstrap"; apt_install debootstrap; }
  root=$(mktemp -d /var/tmp/magnetar-base.XXXXXX)
  log "debootstrap bookworm (minbase + python3) into $root"
  $SUDO debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root" "$MIRROR" >/dev/null
  $SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/usr/share/locale/* "$root"/var/log/*.log
  $SUDO tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
  $SUDO rm -rf "$root"
  log "base image $BASE imported"
fi

cp deploy/Dockerfile deploy/docker-entrypoint "$ctx/"
if [ -n "$wheels_pid" ]; then
  wait "$wheels_pid" || true
  [ -f "$ctx/deps.done" ] || { log "collecting the dependencies' wheels failed"; exit 1; }
fi

# -- 4. the images, built side by side (one mostly downloads, the other mostly unpacks) ---
export DOCKER_BUILDKIT=0
log "building magnetar:$TAG and magnetar-zookeeper:$TAG"
docker build -q --network host --build-arg BASE="$BASE" -t "magnetar-zookeeper:$TAG" \
  deploy/zookeeper > build/image-zookeeper.log 2>&1 &
zk_pid=$!
docker build -q --network host --build-arg BASE="$BASE" -t "magnetar:$TAG" "$ctx" >/dev/null
log "magnetar:$TAG built"
wait "$zk_pid" || { log "magnetar-zookeeper build failed"; cat build/image-zookeeper.log; exit 1; }
log "magnetar-zookeeper:$TAG built"
log "done"
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^(magnetar|magnetar-zookeeper|magnetar-base):" >&2

#!/usr/bin/env bash
# Builds the epp container image FROM scratch (deploy/container/Containerfile) from the host's
# release binary, the shared libraries `ldd` lists for it and Debian's busybox-static, then
# smoke-tests it the way Kubernetes runs it under KServe's securityContext.
#
# Usage: deploy/container/build.sh            (build the binary, the image, run the smoke test)
# Environment:
#   IMAGE=localhost/epp:dev   image name to tag
#   EPP_BINARY=path           use this binary instead of `cargo build --release --locked`
#   SMOKE=0                   build only
#   ENGINE=docker|buildah     default: docker when its daemon answers, else buildah
#                             (`--isolation chroot`, installed with apt-get when missing)
#
# Smoke test (docker): the image runs with `--read-only --user 65532:65532 --cap-drop ALL
# --security-opt no-new-privileges`, ports published on 127.0.0.1 only, its config and
# endpoints file and a TLS key pair mounted read-only. Two fake vLLM `/metrics` servers
# (busybox httpd from the same image, same restrictions) share its network namespace on
# 127.0.0.1:8000 (busy) and 127.0.0.1:8001 (idle). From outside, `cargo test --test
# container_image` checks gRPC health, /healthz and /readyz, and that ext_proc requests over TLS
# are routed to the idle endpoint (which proves the scrapes work inside the container). Then the
# preStop command `/bin/sh -c "sleep 0"` runs through `docker exec`, and `docker stop` (SIGTERM)
# must end the process with status 0 within the grace period.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
IMAGE=${IMAGE:-localhost/epp:dev}
SMOKE=${SMOKE:-1}
say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "$1 is missing and apt-get is not available: install $1"
  [ "$(id -u)" = 0 ] || die "$1 is missing: install it (apt-get install $1) or run as root"
  say "installing $1 with apt-get"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$1" >/dev/null; then
    apt-get update >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$1" >/dev/null
  fi
}

if [ -z "${ENGINE:-}" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then ENGINE=docker; else ENGINE=buildah; fi
fi
case "$ENGINE" in
  docker) ;;
  buildah) command -v buildah >/dev/null 2>&1 || apt_install buildah ;;
  *) die "ENGINE must be docker or buildah, not $ENGINE" ;;
esac

# 1. The binary.
if [ -z "${EPP_BINARY:-}" ]; then
  if ! command -v cargo >/dev/null 2>&1; then
    # shellcheck disable=SC1091
    source "$HOME/.cargo/env"
  fi
  say "cargo build --release --locked"
  start=$(date +%s)
  (cd "$repo" && cargo build --release --locked)
  say "release build took $(( $(date +%s) - start )) s"
  EPP_BINARY=$repo/target/release/epp
fi
[ -x "$EPP_BINARY" ] || die "no executable at $EPP_BINARY"

# 2. The build context: rootfs/ is copied to / by the Containerfile.
work=$(mktemp -d /tmp/epp-image.XXXXXX)
containers=() # docker: container names; buildah: pids of `buildah run` (in container $ctr)
ctr=""
cleanup() {
  if [ "${#containers[@]}" -gt 0 ]; then
    if [ "$ENGINE" = docker ]; then
      docker rm -f "${containers[@]}" >/dev/null 2>&1 || true
    else
      for pid in "${containers[@]}"; do kill "$pid" 2>/dev/null || true; done
      wait 2>/dev/null || true
    fi
  fi
  if [ -n "$ctr" ]; then buildah rm "$ctr" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
rootfs=$work/context/rootfs
mkdir -p "$rootfs/bin" "$rootfs/etc"
cp "$EPP_BINARY" "$rootfs/epp"
strip_note=""
if command -v strip >/dev/null 2>&1 && strip "$rootfs/epp" 2>/dev/null; then strip_note=" (stripped)"; fi
# KServe's newest scheduler template runs `command: /app/epp`: the same binary answers there.
mkdir -p "$rootfs/app"
ln -s ../epp "$rootfs/app/epp"

# Every library the loader would map, at the path it would map it from, plus the loader itself
# at the path the binary names (PT_INTERP). A static binary lists none.
if ldd "$EPP_BINARY" >/dev/null 2>&1; then
  while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done < <(ldd "$EPP_BINARY" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
fi

# A shell for preStop hooks: a statically linked busybox, as /bin/sh and /bin/sleep.
busybox=$(command -v busybox || true)
if [ -z "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
  apt_install busybox-static
  busybox=/bin/busybox
fi
ldd "$busybox" >/dev/null 2>&1 && die "$busybox is dynamically linked; install busybox-static"
cp "$busybox" "$rootfs/bin/busybox"
ln -s busybox "$rootfs/bin/sh"
ln -s busybox "$rootfs/bin/sleep"

printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
cp "$repo/deploy/container/Containerfile" "$work/context/Containerfile"

# 3. The image.
say "building $IMAGE with $ENGINE"
if [ "$ENGINE" = docker ]; then
  # The classic builder: BuildKit may be absent (no buildx plugin) and needs nothing here.
  DOCKER_BUILDKIT=0 docker build -q -f "$work/context/Containerfile" -t "$IMAGE" "$work/context" >/dev/null
  size=$(docker image ls --format '{{.Size}}' "$IMAGE" | head -n1)
else
  buildah bud --isolation chroot -q -f "$work/context/Containerfile" -t "$IMAGE" "$work/context" >/dev/null
  size=$(buildah images --format '{{.Size}}' "$IMAGE" 2>/dev/null || echo "?")
fi
say "image $IMAGE: $size; epp binary $(stat -c %s "$rootfs/epp") bytes$strip_note"
[ "$SMOKE" = 0 ] && exit 0

# 4. Smoke test.
smoke=$work/smoke
mkdir -p "$smoke/config" "$smoke/tls" "$smoke/busy" "$smoke/idle"
cp "$repo/deploy/configs/default.yaml" "$smoke/config/config.yaml"
# Docker gives the containers their own network namespace; buildah's chroot isolation shares the
# host's, so there every server takes a free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
if [ "$ENGINE" = docker ]; then busy_port=8000 idle_port=8001; else busy_port=$(free_port) idle_port=$(free_port); fi
cat >"$smoke/config/endpoints.yaml" <<YAML
endpoints:
  - {name: busy, address: 127.0.0.1, port: $busy_port}
  - {name: idle, address: 127.0.0.1, port: $idle_port}
YAML
exposition() {
  printf '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} %s\n' "$2"
  printf '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} %s\n' "$1"
  printf '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="m"} %s\n' "$3"
}
exposition 40 16 0.95 >"$smoke/busy/metrics"
exposition 0 0 0.05 >"$smoke/idle/metrics"
command -v openssl >/dev/null 2>&1 || apt_install openssl
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -addext basicConstraints=critical,CA:FALSE \
  -addext extendedKeyUsage=serverAuth \
  -keyout "$smoke/tls/tls.key" -out "$smoke/tls/tls.crt" 2>/dev/null
chmod -R a+rX "$smoke"

epp_args=(--config-file /config/config.yaml --endpoints-file /config/endpoints.yaml
  --cert-path /etc/epp/tls --zap-encoder json)
run_tests() { # grpc health metrics
  say "smoke test: ext_proc $1, health $2, metrics $3"
  (cd "$repo" && EPP_IMAGE_GRPC=$1 EPP_IMAGE_HEALTH=$2 EPP_IMAGE_METRICS=$3 EPP_IMAGE_CA=$smoke/tls/tls.crt \
    EPP_IMAGE_ENDPOINT=127.0.0.1:$idle_port cargo test --locked --test container_image -- --nocapture)
}

if [ "$ENGINE" = docker ]; then
  name=epp-smoke-$$
  restricted=(--read-only --user 65532:65532 --cap-drop ALL --security-opt no-new-privileges)
  docker run -d --name "$name" "${restricted[@]}" \
    -p 127.0.0.1::9002 -p 127.0.0.1::9003 -p 127.0.0.1::9090 \
    -v "$smoke/config:/config:ro" -v "$smoke/tls:/etc/epp/tls:ro" "$IMAGE" "${epp_args[@]}" >/dev/null
  containers+=("$name")
  for which in "busy:$busy_port" "idle:$idle_port"; do
    docker run -d --name "$name-${which%%:*}" "${restricted[@]}" --network "container:$name" \
      -v "$smoke/${which%%:*}:/srv/${which%%:*}:ro" --entrypoint /bin/busybox "$IMAGE" \
      httpd -f -p "127.0.0.1:${which##*:}" -h "/srv/${which%%:*}" >/dev/null
    containers+=("$name-${which%%:*}")
  done
  port() { docker port "$name" "$1/tcp" | head -n1; }
  if ! run_tests "$(port 9002)" "$(port 9003)" "$(port 9090)"; then
    docker logs "$name" >&2 || true
    die "smoke test failed"
  fi
  say "KServe's command path: /app/epp --version"
  docker run --rm "${restricted[@]}" --entrypoint /app/epp "$IMAGE" --version
  say "preStop: docker exec $name /bin/sh -c 'sleep 0'"
  docker exec "$name" /bin/sh -c "sleep 0"
  say "docker stop (SIGTERM, grace 30 s)"
  start=$(date +%s%N)
  docker stop -t 30 "$name" >/dev/null
  took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  status=$(docker inspect -f '{{.State.ExitCode}}' "$name")
  [ "$status" = 0 ] || { docker logs "$name" >&2; die "epp exited with status $status after SIGTERM"; }
  say "epp stopped with status 0 in $took_ms ms"
else
  # buildah run has no read-only root filesystem; the user and the dropped capabilities apply.
  g=$(free_port) h=$(free_port) m=$(free_port)
  ctr=$(buildah from "$IMAGE")
  restricted=(--isolation chroot --user 65532:65532 --cap-drop ALL)
  buildah run "${restricted[@]}" -v "$smoke/config:/config:ro" -v "$smoke/tls:/etc/epp/tls:ro" "$ctr" -- \
    /epp "${epp_args[@]}" --bind-address 127.0.0.1 --grpc-port "$g" --grpc-health-port "$h" --metrics-port "$m" \
    2>>"$work/run.log" &
  containers+=("$!")
  for which in "busy:$busy_port" "idle:$idle_port"; do
    buildah run "${restricted[@]}" -v "$smoke/${which%%:*}:/srv/${which%%:*}:ro" "$ctr" -- \
      /bin/busybox httpd -f -p "127.0.0.1:${which##*:}" -h "/srv/${which%%:*}" 2>>"$work/run.log" &
    containers+=("$!")
  done
  if ! run_tests "127.0.0.1:$g" "127.0.0.1:$h" "127.0.0.1:$m"; then
    cat "$work/run.log" >&2
    die "smoke test failed"
  fi
  say "preStop: buildah run $ctr -- /bin/sh -c 'sleep 0'"
  buildah run "${restricted[@]}" "$ctr" -- /bin/sh -c "sleep 0"
fi
say "smoke test passed"

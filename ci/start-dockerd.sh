#!/usr/bin/env bash
# Make sure a Docker daemon answers on this machine: install Debian's docker.io (and the
# other tools the image tests use) when missing, start dockerd when it is not running,
# and wait for its socket. Idempotent; needs root. Used by .ci/run and `make test-image`.
set -euo pipefail

log=${DOCKERD_LOG:-/tmp/dockerd.log}
packages=(docker.io docker-registry debootstrap apache2-utils)

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-registry >/dev/null || missing+=(docker-registry)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v htpasswd >/dev/null || missing+=(apache2-utils)
if ((${#missing[@]})); then
    echo "installing ${missing[*]} (of ${packages[*]})"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
if answers; then
    echo "dockerd already running: $(docker version --format '{{.Server.Version}}')"
    exit 0
fi

echo "starting dockerd (log: $log)"
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 60); do
    if answers; then
        echo "dockerd $(docker version --format '{{.Server.Version}}') is up (pid $!)"
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer within 60 s; last lines of $log:" >&2
tail -20 "$log" >&2
exit 1

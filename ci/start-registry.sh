#!/usr/bin/env bash
# Start a real registry (Debian's docker-registry, distribution 2.8) on 127.0.0.1 with
# htpasswd auth and storage in a temp dir, for trying `invoke push` by hand:
#   ci/start-registry.sh [PORT] [USER] [PASSWORD]    -> prints the pid and the push command
# The tests start their own registry (tests/test_registry.py); this is for people.
set -euo pipefail

port=${1:-5000}
user=${2:-trainer}
password=${3:-trainer-secret}
dir=$(mktemp -d /tmp/tpu-trainer-registry.XXXXXX)

htpasswd -Bbn "$user" "$password" >"$dir/htpasswd"
cat >"$dir/config.yml" <<YAML
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
auth:
  htpasswd:
    realm: tpu-trainer
    path: $dir/htpasswd
YAML
nohup docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
pid=$!
for _ in $(seq 30); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v2/" || true)
    if [[ $code == 401 ]]; then  # up, and asking for credentials as configured
        echo "registry pid $pid on 127.0.0.1:$port (dir $dir, log $dir/registry.log)"
        echo "push: REGISTRY_PASSWORD=$password invoke push --registry 127.0.0.1:$port --username $user"
        echo "stop: kill $pid"
        exit 0
    fi
    sleep 1
done
echo "registry did not start; see $dir/registry.log" >&2
exit 1

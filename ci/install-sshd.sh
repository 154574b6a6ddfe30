#!/usr/bin/env bash
# Install what the pod tests (`pytest -m ssh`, tests/test_pod_ssh.py) need on a fresh
# Debian/Ubuntu CI machine: OpenSSH server and client. The tests start their own sshd on
# 127.0.0.1 with keys they generate; nothing is configured or started here.
set -euo pipefail

if command -v /usr/sbin/sshd >/dev/null && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo -n"; fi
export DEBIAN_FRONTEND=noninteractive
# Keep the package from starting its own sshd on port 22 during the install.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
  $sudo chmod +x /usr/sbin/policy-rc.d
  trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
fi
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends openssh-server openssh-client >/dev/null
# sshd refuses to start without its privilege-separation dir.
$sudo mkdir -p /run/sshd
echo "installed: $(/usr/sbin/sshd -V 2>&1 | head -1)"

#!/usr/bin/env bash
# Install a real Prometheus server (Debian's package `prometheus`) for the monitoring test
# (tests/integration/test_prometheus_eval.py), the same way scripts/cluster.sh installs redis-server:
# nothing to do when `prometheus` is on PATH (or $PROMETHEUS_BIN is set); else apt-get as root or
# with passwordless sudo. The package's own service is not used: the test starts its own server on a
# random port with a temporary TSDB.
set -euo pipefail

log() { echo "[install-prometheus] $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }

if [[ -n "${PROMETHEUS_BIN:-}" ]]; then
    [[ -x "$PROMETHEUS_BIN" ]] || die "PROMETHEUS_BIN=$PROMETHEUS_BIN is not an executable"
    log "using PROMETHEUS_BIN=$PROMETHEUS_BIN"
    exit 0
fi
if command -v prometheus >/dev/null 2>&1; then
    log "prometheus present: $(prometheus --version 2>&1 | head -n1)"
    exit 0
fi
sudo=""
if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo="sudo -n"
    else
        die "prometheus is missing and installing it needs root: run 'sudo apt-get install -y prometheus' (or set PROMETHEUS_BIN)"
    fi
fi
command -v apt-get >/dev/null 2>&1 ||
    die "prometheus is missing and apt-get is not available; install Prometheus >= 2.40 or set PROMETHEUS_BIN"
log "installing prometheus with apt-get ..."
$sudo apt-get update -qq || die "apt-get update failed (network or apt sources?)"
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus ||
    die "apt-get install prometheus failed"
command -v prometheus >/dev/null 2>&1 || die "prometheus still not on PATH after apt-get install"
log "installed $(prometheus --version 2>&1 | head -n1)"

#!/usr/bin/env bash
# Build the pinned `helm` v3 CLI from source through the Go module proxy (no GitHub downloads).
#
#   scripts/install-helm.sh          install into $JOINLIB_CACHE/bin (skipped when present at the pin)
#   scripts/install-helm.sh --path   only print where helm is/would be installed
#
# Environment (defaults):
#   JOINLIB_CACHE  ($HOME/.cache/joinlib)   helm lands in $JOINLIB_CACHE/bin/helm
#   HELM_VERSION   (v3.22.0)                helm.sh/helm/v3 module version; needs Go >= 1.26
#   GO             (go on PATH, else /usr/local/go/bin/go)
#
# Prints the absolute path of the helm binary on the last line of stdout.
# A cold build downloads ~150 modules and compiles them: a few minutes; a warm module
# cache makes it ~1 min; an existing binary at the pinned version returns at once.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${JOINLIB_CACHE:-$HOME/.cache/joinlib}"
BIN_DIR="$CACHE/bin"
HELM="$BIN_DIR/helm"

if [[ "${1:-}" == "--path" ]]; then
    echo "$HELM"
    exit 0
fi

installed_version() {
    # `helm version --template` prints e.g. v3.22.0 (go install builds embed the module version
    # only via -ldflags, so fall back to `go version -m` which always knows the module version).
    local go_bin="$1"
    "$go_bin" version -m "$HELM" 2>/dev/null | awk '$1 == "mod" && $2 == "helm.sh/helm/v3" {print $3}'
}

if [[ -n "${GO:-}" ]]; then
    GO_BIN="$GO"
elif command -v go >/dev/null 2>&1; then
    GO_BIN="$(command -v go)"
elif [[ -x /usr/local/go/bin/go ]]; then
    GO_BIN=/usr/local/go/bin/go
else
    echo "install-helm: no Go toolchain found (need Go >= 1.26 for helm $HELM_VERSION); set GO=/path/to/go" >&2
    exit 1
fi

# The stamp records what the binary was built from; a binary without it (or another pin) is rebuilt.
STAMP="$HELM.stamp"
WANT_STAMP="helm.sh/helm/v3@$HELM_VERSION ldflags=v1"
if [[ -x "$HELM" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT_STAMP" ]]; then
    echo "install-helm: helm $HELM_VERSION already present" >&2
    echo "$HELM"
    exit 0
fi
if [[ -x "$HELM" ]]; then
    echo "install-helm: replacing $HELM ($(installed_version "$GO_BIN" || true)) with $HELM_VERSION" >&2
fi

mkdir -p "$BIN_DIR"
echo "install-helm: building helm.sh/helm/v3/cmd/helm@$HELM_VERSION with $("$GO_BIN" version)" >&2
start=$(date +%s)
export GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED="${CGO_ENABLED:-0}"

# Same -ldflags as helm's Makefile: the version `helm version` reports, and the default
# Kubernetes version (client-go minor + 1.x) that `helm template`/`lint` assume without
# --kube-version. A plain `go install` leaves the latter at v1.20.0.
gomod="$("$GO_BIN" mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
client_go="$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$gomod")"   # e.g. v0.37.0
if [[ ! "$client_go" =~ ^v0\.([0-9]+)\. ]]; then
    echo "install-helm: cannot read the k8s.io/client-go version from $gomod" >&2
    exit 1
fi
k8s_minor="${BASH_REMATCH[1]}"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

GOBIN="$BIN_DIR" "$GO_BIN" install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
echo "$WANT_STAMP" > "$STAMP"
echo "install-helm: built in $(( $(date +%s) - start ))s: $("$HELM" version --short) (default Kubernetes v1.$k8s_minor)" >&2
echo "$HELM"

#!/usr/bin/env bash
# Test bed component: the helm client, for the tests that lint and render the operator's
# chart (deploy/helm/) and validate the result against the kube component's API server.
#
# usage: helm.sh up|down|status
#
#   up      build helm $HELM_VERSION from the Go module proxy (`go install
#           helm.sh/helm/v3/cmd/helm@VERSION`, so with exactly the dependency versions helm's
#           own go.mod pins) into $TESTBED_DIR/helm/bin unless a helm reporting that version
#           is already there (a few minutes once; the Go module and build caches stay under
#           $TESTBED_DIR/helm/build); write facts.json. Idempotent; quick when already built.
#   down    nothing runs, so nothing stops; the binary and caches are kept.
#   status  print whether the pinned helm is built; exit 0 if so, 1 if not.
#
# What tests get ($TESTBED_DIR/helm/facts.json):
#   {"helm":".../helm/bin/helm","version":"v3.22.0"}
# helm is only a client here: tests run `helm lint` and `helm template`, which need no
# cluster, and validate what it renders with the kube component's kubectl.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

# Pinned version (a tag of helm.sh/helm/v3 on the Go module proxy).
HELM_VERSION=v3.22.0

COMPONENT_NAME=helm
HELM_DIR="$TESTBED_DIR/helm"
BIN_DIR="$HELM_DIR/bin"
BUILD_DIR="$HELM_DIR/build"
BUILD_LOG="$BUILD_DIR/build.log"
HELM="$BIN_DIR/helm"
FACTS="$HELM_DIR/facts.json"
LOCK_FILE="$HELM_DIR/.lock"

lock_fd=""

# helm_version : the version the built binary reports (empty when there is none).
helm_version() {
    [[ -x "$HELM" ]] || return 0
    HELM_CONFIG_HOME=/nonexistent HELM_CACHE_HOME=/nonexistent HELM_DATA_HOME=/nonexistent \
        "$HELM" version --template '{{.Version}}' 2>/dev/null || true
}

helm_ok() {
    [[ -s "$FACTS" && "$(helm_version)" == "$HELM_VERSION" ]]
}

# build_helm : what helm's Makefile stamps in: the version, and the Kubernetes version of the
# client-go it was built with (the default .Capabilities.KubeVersion of `helm template` and
# the version `helm lint` checks deprecated APIs against).
build_helm() {
    local started=$SECONDS client_go minor ldflags
    GO="$(find_go "helm")"
    log "helm: building helm $HELM_VERSION with $("$GO" version) (log: $BUILD_LOG)"
    install -d "$BIN_DIR" "$BUILD_DIR"
    client_go="$(cd "$BUILD_DIR" && env GOMODCACHE="$BUILD_DIR/gomodcache" GOFLAGS=-modcacherw \
        GOTOOLCHAIN=local GOWORK=off "$GO" mod download -json "helm.sh/helm/v3@$HELM_VERSION" \
        2>>"$BUILD_LOG" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')" ||
        die "helm.sh/helm/v3@$HELM_VERSION not found through the Go module proxy (log: $BUILD_LOG)"
    [[ -s "$client_go" ]] ||
        die "helm.sh/helm/v3@$HELM_VERSION not found through the Go module proxy (log: $BUILD_LOG)"
    # k8s.io/client-go v0.Y.Z is Kubernetes 1.Y.
    minor="$(awk '$1 == "k8s.io/client-go" { split($2, v, "."); print v[2] }' "$client_go")"
    [[ "$minor" =~ ^[0-9]+$ ]] || die "no k8s.io/client-go requirement in $client_go"
    ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
    ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    local pkg
    for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
        ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
    done
    rm -rf "$BUILD_DIR/out"
    GOBIN="$BUILD_DIR/out" go_logged "$BUILD_DIR" install -ldflags "$ldflags" \
        "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    mv -f "$BUILD_DIR/out/helm" "$HELM"
    [[ "$(helm_version)" == "$HELM_VERSION" ]] ||
        die "built helm reports '$(helm_version)', not $HELM_VERSION"
    log "helm: build took $((SECONDS - started))s"
}

write_facts() {
    printf '{"helm":"%s","version":"%s"}\n' "$(json_escape "$HELM")" "$HELM_VERSION" >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

take_lock() {
    install -d -m 755 "$HELM_DIR"
    lock_component "$LOCK_FILE" "$FIRST_BUILD_WAIT"
}

cmd_up() {
    if helm_ok; then
        log "helm: $HELM_VERSION ready at $HELM"
        return 0
    fi
    command -v flock >/dev/null || apt_install util-linux
    # The go tool needs the CA bundle to reach the module proxy.
    [[ -s /etc/ssl/certs/ca-certificates.crt ]] || apt_install ca-certificates
    take_lock
    if [[ "$(helm_version)" != "$HELM_VERSION" ]]; then
        build_helm
    fi
    write_facts
    log "helm: $HELM_VERSION ready at $HELM, facts: $FACTS"
}

cmd_down() {
    log "helm: nothing to stop (binary and build cache kept in $HELM_DIR)"
}

cmd_status() {
    if helm_ok; then
        echo "helm: $HELM_VERSION at $HELM, facts: $FACTS"
        return 0
    fi
    echo "helm: not ready (want $HELM_VERSION at $HELM, found '$(helm_version)'; facts: $FACTS)"
    return 1
}

component_main "$@"

#!/usr/bin/env bash
# Test bed component: a real Kubernetes API server on 127.0.0.1:6443 (kube-apiserver backed
# by etcd on 127.0.0.1:12379), the pair controller-runtime's envtest runs, for the operator's
# end-to-end tests; beside it, kube-controller-manager running one controller only,
# clusterrole-aggregation, which fills the built-in admin/edit/view roles with the rules of
# the roles that aggregate into them (batchbridge-edit and batchbridge-view among them).
#
# usage: kube.sh up|down|status
#
#   up      build kube-apiserver, kube-controller-manager, kubectl and etcd from the Go
#           module proxy if
#           $TESTBED_DIR/kube/bin lacks the pinned versions (a few minutes once; the Go
#           module and build caches stay under $TESTBED_DIR/kube/build); make a private PKI
#           once (kept); start etcd, kube-apiserver and kube-controller-manager unless
#           already running and healthy;
#           check kubectl, a ConfigMap round trip, a server-side dry run, a ServiceAccount
#           token from the TokenRequest API and that RBAC forbids that token to list
#           Secrets; write kubeconfig and facts.json. Idempotent; quick when already up.
#   down    stop kube-controller-manager, kube-apiserver and etcd (by their pid files) and delete etcd's data, so the
#           next `up` starts with an empty cluster. Binaries, caches and the PKI are kept.
#   status  print whether each daemon is running and ready; exit 0 if up, 1 if not.
#
# What tests get ($TESTBED_DIR/kube/facts.json):
#   {"server":"https://127.0.0.1:6443","kubeconfig":".../kube/kubeconfig",
#    "kubectl":".../kube/bin/kubectl","version":"v1.34.10",...}
# The kubeconfig authenticates as a cluster admin (client certificate, O=system:masters)
# and embeds its certificates, so it can be copied anywhere.
#
# What a bare API server does not do (as in envtest): no scheduler or kubelet runs, and of
# kube-controller-manager only the clusterrole-aggregation controller, so objects are stored, validated (schemas, CEL rules, admission webhooks,
# RBAC) and watched, but no pod ever starts, owner references are not garbage-collected,
# deleted namespaces stay Terminating, and no ServiceAccount (not even `default`) or token
# Secret is created by itself: create the ServiceAccount and get tokens from the TokenRequest
# API (`kubectl create token NAME`). The ServiceAccount admission plugin is disabled (like
# envtest), so pods can be created in namespaces without a `default` ServiceAccount.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

# Pinned versions. k8s.io/kubernetes vX.Y.Z publishes its staging modules (k8s.io/api,
# k8s.io/apiserver, ...) as v0.Y.Z; the proxy must also have sum.golang.org entries for them.
K8S_VERSION=v1.34.10
ETCD_VERSION=v3.6.14
STAGING_VERSION="v0.${K8S_VERSION#v1.}"

KUBE_HOST=127.0.0.1
API_PORT=6443
ETCD_PORT=12379
ETCD_PEER_PORT=12380
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1
SERVER="https://$KUBE_HOST:$API_PORT"
ETCD_URL="http://$KUBE_HOST:$ETCD_PORT"

COMPONENT_NAME=kube
KUBE_DIR="$TESTBED_DIR/kube"
DAEMON_DIR="$KUBE_DIR"
BIN_DIR="$KUBE_DIR/bin"
BUILD_DIR="$KUBE_DIR/build"
BUILD_LOG="$BUILD_DIR/build.log"
PKI_DIR="$KUBE_DIR/pki"
ETCD_DATA_DIR="$KUBE_DIR/etcd"
KUBECONFIG_FILE="$KUBE_DIR/kubeconfig"
KUBECTL="$BIN_DIR/kubectl"
FACTS="$KUBE_DIR/facts.json"
LOCK_FILE="$KUBE_DIR/.lock"
# Start order; `down` stops them in reverse.
DAEMONS=(etcd kube-apiserver kube-controller-manager)

lock_fd=""
# Set when this run made new certificates: a running apiserver must then be restarted.
PKI_CHANGED=0

# ---------------------------------------------------------------------------
# Build

# binary_version NAME : the version the built binary reports, to tell whether it is current.
binary_version() {
    local bin="$BIN_DIR/$1"
    [[ -x "$bin" ]] || return 0
    case "$1" in
    kube-apiserver | kube-controller-manager) "$bin" --version 2>/dev/null | awk '{print $2}' ;;
    kubectl) "$bin" version --client 2>/dev/null | awk '/^Client Version:/ {print $3}' ;;
    etcd) "$bin" --version 2>/dev/null | awk '/^etcd Version:/ {print "v" $3}' ;;
    esac
}

# new_build_module DIR : an empty throwaway module; remade each build so edits never pile up.
new_build_module() {
    install -d "$1"
    rm -f "$1/go.mod" "$1/go.sum"
    go_logged "$1" mod init "batchbridge.invalid/testbed-$(basename "$1")-build"
}

# kubernetes' own go.mod points every staging module at ./staging/src/...; a consumer must
# replace each with its published v0.Y.Z, so the list is read from that go.mod, not typed in.
build_kubernetes() {
    local dir="$BUILD_DIR/kubernetes" info gomod goversion buildtime mod kv pkg
    local minor="${K8S_VERSION#v1.}" edits=() ldflags="-s -w"
    minor="${minor%%.*}"
    log "kube: building kube-apiserver, kube-controller-manager and kubectl $K8S_VERSION (log: $BUILD_LOG)"
    new_build_module "$dir"
    info="$(go_in "$BUILD_DIR" list -m \
        -f '{{.GoMod}} {{.GoVersion}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' \
        "k8s.io/kubernetes@$K8S_VERSION" 2>>"$BUILD_LOG")" ||
        die "k8s.io/kubernetes@$K8S_VERSION not found through the Go module proxy (log: $BUILD_LOG)"
    read -r gomod goversion buildtime <<<"$info"

    edits=(-go="$goversion" -require="k8s.io/kubernetes@$K8S_VERSION"
        -tool=k8s.io/kubernetes/cmd/kube-apiserver -tool=k8s.io/kubernetes/cmd/kubectl
        -tool=k8s.io/kubernetes/cmd/kube-controller-manager)
    while read -r mod; do
        edits+=(-replace="$mod=$mod@$STAGING_VERSION")
    done < <(awk '{ sub(/^[ \t]*replace[ \t]+/, "") }
                  $2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$gomod")
    ((${#edits[@]} > 20)) || die "found no staging modules in $gomod"
    # Same GODEBUG defaults as the official binaries.
    while read -r kv; do
        edits+=(-godebug="$kv")
    done < <(awk '$1 == "godebug" && $2 != "(" { print $2 }' "$gomod")
    go_logged "$dir" mod edit "${edits[@]}"
    go_logged "$dir" mod tidy

    # What hack/lib/version.sh stamps in, so `kubectl version` and /version say the release.
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$buildtime"
    done
    rm -rf "$dir/out"
    go_logged "$dir" build -ldflags "$ldflags" -o "$dir/out/" \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl \
        k8s.io/kubernetes/cmd/kube-controller-manager
    mv -f "$dir/out/kube-apiserver" "$dir/out/kubectl" "$dir/out/kube-controller-manager" "$BIN_DIR/"
}

# etcd gets a module of its own: built together with kubernetes, MVS would mix their
# grpc/otel versions into a binary neither project tested.
build_etcd() {
    local dir="$BUILD_DIR/etcd" goversion
    log "kube: building etcd $ETCD_VERSION (log: $BUILD_LOG)"
    new_build_module "$dir"
    goversion="$(go_in "$BUILD_DIR" list -m -f '{{.GoVersion}}' \
        "go.etcd.io/etcd/server/v3@$ETCD_VERSION" 2>>"$BUILD_LOG")" ||
        die "go.etcd.io/etcd/server/v3@$ETCD_VERSION not found through the Go module proxy (log: $BUILD_LOG)"
    go_logged "$dir" mod edit -go="$goversion" -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
        -tool=go.etcd.io/etcd/server/v3
    go_logged "$dir" mod tidy
    rm -rf "$dir/out"
    go_logged "$dir" build -ldflags "-s -w" -o "$dir/out/etcd" go.etcd.io/etcd/server/v3
    mv -f "$dir/out/etcd" "$BIN_DIR/etcd"
}

# ensure_binaries : build only what is missing or not at the pinned version.
ensure_binaries() {
    local need_kube=0 need_etcd=0 started=$SECONDS
    [[ "$(binary_version kube-apiserver)" == "$K8S_VERSION" ]] || need_kube=1
    [[ "$(binary_version kubectl)" == "$K8S_VERSION" ]] || need_kube=1
    [[ "$(binary_version kube-controller-manager)" == "$K8S_VERSION" ]] || need_kube=1
    [[ "$(binary_version etcd)" == "$ETCD_VERSION" ]] || need_etcd=1
    ((need_kube || need_etcd)) || return 0

    GO="$(find_go "kube-apiserver and etcd")"
    log "kube: using $("$GO" version)"
    install -d "$BIN_DIR" "$BUILD_DIR"
    if ((need_etcd)); then
        build_etcd
        [[ "$(binary_version etcd)" == "$ETCD_VERSION" ]] || die "built etcd does not report $ETCD_VERSION"
    fi
    if ((need_kube)); then
        build_kubernetes
        [[ "$(binary_version kube-apiserver)" == "$K8S_VERSION" ]] ||
            die "built kube-apiserver does not report $K8S_VERSION"
    fi
    log "kube: build took $((SECONDS - started))s"
}

# ---------------------------------------------------------------------------
# PKI (openssl; made once, kept across down/up so copied kubeconfigs stay valid)

# cert_ok NAME : NAME.crt and NAME.key exist, chain to our CA and last at least another day.
cert_ok() {
    [[ -s "$PKI_DIR/$1.crt" && -s "$PKI_DIR/$1.key" ]] &&
        openssl x509 -checkend 86400 -noout -in "$PKI_DIR/$1.crt" >/dev/null 2>&1 &&
        openssl verify -CAfile "$PKI_DIR/ca.crt" "$PKI_DIR/$1.crt" >/dev/null 2>&1
}

write_openssl_config() {
    cat >"$PKI_DIR/openssl.cnf" <<EOF
# Generated by tests/testbed/kube.sh.
[req]
distinguished_name = req_dn
prompt = no
[req_dn]
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:$KUBE_HOST, IP:$SERVICE_IP, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
EOF
}

# issue_cert NAME SUBJECT EXTENSIONS : a key and a certificate signed by our CA.
issue_cert() {
    local name="$1" subject="$2" ext="$3"
    log "kube: issuing certificate $name ($subject)"
    (
        umask 077
        openssl req -new -newkey rsa:2048 -nodes -config "$PKI_DIR/openssl.cnf" \
            -subj "$subject" -keyout "$PKI_DIR/$name.key" -out "$PKI_DIR/$name.csr" 2>/dev/null
    )
    openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/ca.crt" -CAkey "$PKI_DIR/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 \
        -extfile "$PKI_DIR/openssl.cnf" -extensions "$ext" -out "$PKI_DIR/$name.crt" 2>/dev/null
    rm -f "$PKI_DIR/$name.csr"
    PKI_CHANGED=1
}

# One CA signs the serving certificate and the client certificates (--client-ca-file); the
# service account tokens get their own key pair.
ensure_pki() {
    install -d -m 700 "$PKI_DIR"
    write_openssl_config
    if ! [[ -s "$PKI_DIR/ca.key" ]] ||
        ! openssl x509 -checkend 86400 -noout -in "$PKI_DIR/ca.crt" >/dev/null 2>&1; then
        log "kube: creating the test bed CA in $PKI_DIR"
        rm -f "$PKI_DIR"/*.crt "$PKI_DIR"/*.key
        (
            umask 077
            openssl req -x509 -new -newkey rsa:2048 -nodes -config "$PKI_DIR/openssl.cnf" \
                -extensions ca_ext -subj "/CN=batchbridge-testbed-kube-ca" -days 3650 -sha256 \
                -keyout "$PKI_DIR/ca.key" -out "$PKI_DIR/ca.crt" 2>/dev/null
        )
        PKI_CHANGED=1
    fi
    cert_ok apiserver || issue_cert apiserver "/CN=kube-apiserver" server_ext
    cert_ok admin || issue_cert admin "/O=system:masters/CN=batchbridge-testbed-admin" client_ext
    if ! [[ -s "$PKI_DIR/sa.key" && -s "$PKI_DIR/sa.pub" ]]; then
        log "kube: creating the service account signing key"
        (
            umask 077
            openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI_DIR/sa.key" 2>/dev/null
        )
        openssl pkey -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub"
        PKI_CHANGED=1
    fi
    chmod 600 "$PKI_DIR"/*.key
    chmod 644 "$PKI_DIR"/*.crt "$PKI_DIR/sa.pub"
}

# Certificates embedded: the file alone is enough, also when copied into a container.
write_kubeconfig() {
    (
        umask 077
        cat >"$KUBECONFIG_FILE.tmp" <<EOF
# Generated by tests/testbed/kube.sh: cluster admin (O=system:masters) of the test bed.
apiVersion: v1
kind: Config
clusters:
- name: batchbridge-testbed
  cluster:
    server: $SERVER
    certificate-authority-data: $(base64 -w0 "$PKI_DIR/ca.crt")
users:
- name: batchbridge-testbed-admin
  user:
    client-certificate-data: $(base64 -w0 "$PKI_DIR/admin.crt")
    client-key-data: $(base64 -w0 "$PKI_DIR/admin.key")
contexts:
- name: batchbridge-testbed
  context:
    cluster: batchbridge-testbed
    user: batchbridge-testbed-admin
    namespace: default
current-context: batchbridge-testbed
EOF
    )
    mv -f "$KUBECONFIG_FILE.tmp" "$KUBECONFIG_FILE"
}

# ---------------------------------------------------------------------------
# Processes (helpers in lib.sh)

# daemon_is NAME PID : true if PID runs $BIN_DIR/NAME, our own build (not, e.g., someone
# else's etcd).
daemon_is() {
    local argv0
    # The braces take the redirection's own error (a pid from a stale file is gone).
    argv0="$({ tr '\0' '\n' <"/proc/$2/cmdline"; } 2>/dev/null | head -n 1 || true)"
    [[ "$argv0" == "$BIN_DIR/$1" ]]
}

# ---------------------------------------------------------------------------
# Health checks (each quick, each safe to run when things are down)

etcd_healthy() {
    curl -fsS --max-time 2 "$ETCD_URL/health" 2>/dev/null | grep -q '"health":"true"'
}

etcd_version() {
    curl -fsS --max-time 2 "$ETCD_URL/version" 2>/dev/null |
        sed -n 's/.*"etcdserver":"\([^"]*\)".*/v\1/p'
}

# api_get PATH : GET PATH as the admin; fails on any non-2xx answer.
api_get() {
    [[ -s "$PKI_DIR/admin.key" ]] || return 1
    curl -fsS --max-time 3 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" \
        --key "$PKI_DIR/admin.key" "$SERVER$1" 2>/dev/null
}

apiserver_ready() {
    [[ "$(api_get /readyz)" == ok ]]
}

server_version() {
    api_get /version | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p'
}

kube_ok() {
    [[ -s "$FACTS" && -x "$KUBECTL" ]] && apiserver_ready &&
        [[ "$(server_version)" == "$K8S_VERSION" ]] && daemon_pid kube-controller-manager >/dev/null
}

kctl() {
    "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" --request-timeout=10s "$@"
}

# ---------------------------------------------------------------------------
# Daemons

# etcd only listens on 127.0.0.1 (peer port too: its default 2380 is on every interface), and
# skips fsync like envtest's: its data is thrown away by `down` anyway.
ensure_etcd() {
    if daemon_pid etcd >/dev/null && etcd_healthy && [[ "$(etcd_version)" == "$ETCD_VERSION" ]]; then
        return 0
    fi
    stop_daemon etcd 30
    if port_open "$ETCD_PORT"; then
        die "something else already listens on $KUBE_HOST:$ETCD_PORT (not our etcd, no valid $(pid_file etcd))"
    fi
    install -d -m 700 "$ETCD_DATA_DIR"
    start_daemon etcd "$BIN_DIR/etcd" \
        --name=batchbridge-testbed \
        --data-dir="$ETCD_DATA_DIR" \
        --listen-client-urls="$ETCD_URL" \
        --advertise-client-urls="$ETCD_URL" \
        --listen-peer-urls="http://$KUBE_HOST:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls="http://$KUBE_HOST:$ETCD_PEER_PORT" \
        --initial-cluster="batchbridge-testbed=http://$KUBE_HOST:$ETCD_PEER_PORT" \
        --unsafe-no-fsync=true \
        --log-level=warn
    wait_daemon etcd 60 "etcd health on $ETCD_URL" etcd_healthy
    log "kube: etcd $ETCD_VERSION up on $ETCD_URL (pid $(daemon_pid etcd || echo '?'))"
}

# The flags envtest passes (controller-runtime pkg/internal/testing/controlplane), with our
# own PKI instead of its throwaway one and a fixed port.
ensure_apiserver() {
    if ((PKI_CHANGED == 0)) && daemon_pid kube-apiserver >/dev/null && apiserver_ready &&
        [[ "$(server_version)" == "$K8S_VERSION" ]]; then
        return 0
    fi
    stop_daemon kube-apiserver 30
    if port_open "$API_PORT"; then
        die "something else already listens on $KUBE_HOST:$API_PORT (not our kube-apiserver, no valid $(pid_file kube-apiserver))"
    fi
    start_daemon kube-apiserver "$BIN_DIR/kube-apiserver" \
        --bind-address="$KUBE_HOST" \
        --advertise-address="$KUBE_HOST" \
        --secure-port="$API_PORT" \
        --etcd-servers="$ETCD_URL" \
        --tls-cert-file="$PKI_DIR/apiserver.crt" \
        --tls-private-key-file="$PKI_DIR/apiserver.key" \
        --client-ca-file="$PKI_DIR/ca.crt" \
        --authorization-mode=RBAC \
        --service-account-issuer="$SERVER" \
        --service-account-key-file="$PKI_DIR/sa.pub" \
        --service-account-signing-key-file="$PKI_DIR/sa.key" \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --allow-privileged=true \
        --disable-admission-plugins=ServiceAccount
    wait_daemon kube-apiserver 120 "$SERVER/readyz" apiserver_ready
    log "kube: kube-apiserver $K8S_VERSION ready on $SERVER (pid $(daemon_pid kube-apiserver || echo '?'))"
}

# The built-in `view` role has rules only once the aggregation controller has filled them in
# (the bootstrap policy leaves them to it).
view_aggregated() {
    [[ -n "$(kctl get clusterrole view -o jsonpath='{.rules}' 2>/dev/null)" ]]
}

# Only the clusterrole-aggregation controller, as the cluster admin (the test bed's one
# identity); no leader election and no serving port, as nothing else runs beside it.
ensure_controller_manager() {
    if ((PKI_CHANGED == 0)) && daemon_pid kube-controller-manager >/dev/null; then
        return 0
    fi
    stop_daemon kube-controller-manager 30
    start_daemon kube-controller-manager "$BIN_DIR/kube-controller-manager" \
        --kubeconfig="$KUBECONFIG_FILE" \
        --controllers=clusterrole-aggregation \
        --leader-elect=false \
        --secure-port=0
    wait_daemon kube-controller-manager 60 "the built-in view role to be aggregated" view_aggregated
    log "kube: kube-controller-manager (clusterrole-aggregation only) up (pid $(daemon_pid kube-controller-manager || echo '?'))"
}

# ---------------------------------------------------------------------------
# End-to-end check: what the operator's tests rely on, through kubectl as they will use it.

namespace_default_ok() {
    kctl get namespace default -o name >/dev/null 2>&1
}

end_to_end_check() {
    local cm=batchbridge-testbed-check token code body
    WAIT_FOR_SLEEP=0.5 wait_for 60 "namespace default" namespace_default_ok ||
        die "kubectl get namespace default failed"

    kctl -n default create configmap "$cm" --from-literal=k=v --dry-run=server -o name >/dev/null ||
        die "server-side dry run of a ConfigMap failed"
    kctl -n default delete configmap "$cm" --ignore-not-found >/dev/null
    kctl -n default create configmap "$cm" --from-literal=k=v >/dev/null ||
        die "creating a ConfigMap failed"
    [[ "$(kctl -n default get configmap "$cm" -o jsonpath='{.data.k}')" == v ]] ||
        die "the ConfigMap did not read back"
    kctl -n default delete configmap "$cm" --wait=true >/dev/null || die "deleting a ConfigMap failed"

    # No controller-manager creates the default ServiceAccount.
    kctl -n default get serviceaccount default >/dev/null 2>&1 ||
        kctl -n default create serviceaccount default >/dev/null
    token="$(kctl -n default create token default --duration=10m)" ||
        die "kubectl create token (TokenRequest API) failed"
    [[ -n "$token" ]] || die "kubectl create token printed nothing"

    # The token must authenticate (403, not 401) and RBAC must deny it.
    body="$(curl -sS --max-time 5 --cacert "$PKI_DIR/ca.crt" -H "Authorization: Bearer $token" \
        -w '\n%{http_code}' "$SERVER/api/v1/namespaces/default/secrets")" ||
        die "request with the ServiceAccount token failed"
    code="${body##*$'\n'}"
    [[ "$code" == 403 && "$body" == *system:serviceaccount:default:default* ]] ||
        die "listing secrets with the default ServiceAccount's token: expected 403 Forbidden, got $code: ${body%$'\n'*}"
    log "kube: kubectl, ConfigMap round trip, dry run, TokenRequest and RBAC (403 for the token) ok"
}

write_facts() {
    printf '{"server":"%s","kubeconfig":"%s","kubectl":"%s","version":"%s","ca":"%s","etcd":"%s","etcd_version":"%s"}\n' \
        "$SERVER" "$(json_escape "$KUBECONFIG_FILE")" "$(json_escape "$KUBECTL")" "$K8S_VERSION" \
        "$(json_escape "$PKI_DIR/ca.crt")" "$ETCD_URL" "$ETCD_VERSION" >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

take_lock() {
    install -d -m 755 "$KUBE_DIR"
    lock_component "$LOCK_FILE" "$FIRST_BUILD_WAIT"
}

# ---------------------------------------------------------------------------

cmd_up() {
    if kube_ok; then
        log "kube: already up on $SERVER"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || die "kube.sh up must run as root"
    local started=$SECONDS
    command -v curl >/dev/null || apt_install curl
    command -v openssl >/dev/null || apt_install openssl
    command -v flock >/dev/null || apt_install util-linux
    # The go tool and curl need the CA bundle to reach the module proxy.
    [[ -s /etc/ssl/certs/ca-certificates.crt ]] || apt_install ca-certificates
    take_lock
    # Someone else may have brought it up while we waited for the lock.
    if kube_ok; then
        log "kube: already up on $SERVER"
        return 0
    fi

    ensure_binaries
    ensure_pki
    write_kubeconfig
    ensure_etcd
    ensure_apiserver
    ensure_controller_manager
    end_to_end_check
    write_facts
    log "kube: up on $SERVER ($K8S_VERSION, etcd $ETCD_VERSION) in $((SECONDS - started))s, facts: $FACTS"
}

cmd_down() {
    [[ -d "$KUBE_DIR" ]] || {
        log "kube: down"
        return 0
    }
    take_lock
    local i
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        stop_daemon "${DAEMONS[i]}" 30
    done
    if port_open "$ETCD_PORT"; then
        log "kube: something still listens on $KUBE_HOST:$ETCD_PORT; keeping $ETCD_DATA_DIR"
    else
        rm -rf "$ETCD_DATA_DIR"
    fi
    log "kube: down (etcd data removed; binaries, build cache and PKI kept in $KUBE_DIR)"
}

cmd_status() {
    local etcd_state api_state kcm_state pid
    if pid="$(daemon_pid etcd)"; then
        etcd_state="running (pid $pid), $(etcd_healthy && echo healthy || echo 'not healthy')"
    else
        etcd_state="stopped"
    fi
    if pid="$(daemon_pid kube-apiserver)"; then
        api_state="running (pid $pid), $(apiserver_ready && echo ready || echo 'not ready')"
    else
        api_state="stopped"
    fi
    if pid="$(daemon_pid kube-controller-manager)"; then
        kcm_state="running (pid $pid)"
    else
        kcm_state="stopped"
    fi
    if kube_ok; then
        echo "kube: up on $SERVER ($K8S_VERSION; etcd: $etcd_state; kube-apiserver: $api_state; kube-controller-manager: $kcm_state), facts: $FACTS"
        return 0
    fi
    echo "kube: down (etcd: $etcd_state; kube-apiserver: $api_state; kube-controller-manager: $kcm_state)"
    return 1
}

component_main "$@"

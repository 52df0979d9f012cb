# The batchbridge operator image. No registry publishes it: build it, and for kind load it
# into the cluster's nodes in the same command (minikube: `minikube image load` instead):
#
#   docker build -t batchbridge-operator:0.1.0 . && kind load docker-image batchbridge-operator:0.1.0
#
# then install the chart with --set image.repository=batchbridge-operator (the kustomize base
# deploys batchbridge-operator:0.1.0 as checked in), or push it to a registry and name that
# (README, "Deploy on Kubernetes"). The Helm chart and the kustomize base pass the image they
# deploy to the operator as OPERATOR_IMAGE, because the log pods (`fetch-output` mode) run
# this same image, and their admission policy lets the operator create pods of that image
# only.
#
# CI has no docker daemon, so it verifies the runtime stage without one:
# tests/testbed/image.sh builds the stage's root filesystem from this file's own
# instructions (debootstrap of the FROM suite, then every RUN of the last stage, with its ENV),
# and batchbridge-operator/tests/image_runtime.rs runs the operator binary in it as the USER
# below, on a read-only root with only /tmp writable, as the Deployment and the log pods run
# it, up to a log pod's fetch-output over SSH against the SLURM test bed. Keep the last stage
# to what image.sh understands (FROM debian:SUITE[-slim], shell-form RUN, ENV, USER, WORKDIR,
# one COPY --from, EXPOSE, LABEL, exec-form ENTRYPOINT and CMD); it stops with a message on
# anything else.

# Build stage: the official Rust image of the toolchain the project uses (rustc 1.95), on
# the same Debian release as the runtime stage, so the binary links against the glibc it
# will run with.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
# The whole workspace: cargo needs every member's manifest to resolve the workspace, and
# Cargo.lock pins every dependency (--locked refuses to change it). .dockerignore keeps
# target/, .git/ and deploy/ out of the context.
COPY . .
RUN cargo build --release --locked -p batchbridge-operator --bin batchbridge-operator \
    && install -D -m 0755 target/release/batchbridge-operator /out/batchbridge-operator

# Runtime stage: Debian slim with only what the operator executes itself. The SSH client
# is the OpenSSH `ssh` binary (driven by the openssh crate), not a Rust library, and
# ca-certificates lets it and the Kubernetes client verify TLS peers outside the cluster.
# krb5-user is MIT Kerberos's `kinit`, which the operator and the log pods run to get a
# ticket from a BatchCluster's keytab Secret (`ssh` itself only does GSSAPI with a ticket).
# --no-install-recommends leaves out its Recommends krb5-config, which would ask debconf
# questions (default realm, KDCs) and pull bind9-host; the Kerberos configuration is the
# deployer's krb5.conf instead (the chart's kerberos.krb5ConfConfigMap, KRB5_CONFIG).
FROM docker.io/library/debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-client ca-certificates krb5-user \
    && rm -rf /var/lib/apt/lists/*
# A numeric non-root user that also exists in /etc/passwd: ssh refuses to run for a uid
# without a passwd entry ("No user exists for uid"), and a numeric USER lets the kubelet
# verify runAsNonRoot (the log pods set runAsNonRoot without a runAsUser). Its home does
# not exist: the operator runs ssh with `-F none` and every file (control sockets,
# known_hosts, keys) in a private directory under $TMPDIR, so a read-only root file system
# needs only a writable /tmp (the manifests mount an emptyDir there).
RUN groupadd --system --gid 65532 batchbridge \
    && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin batchbridge
COPY --from=build /out/batchbridge-operator /usr/local/bin/batchbridge-operator
USER 65532:65532
ENV TMPDIR=/tmp
# METRICS_ADDR's default port: /metrics, /healthz and /readyz.
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/batchbridge-operator"]
# `run` runs the controllers; the log pods run `fetch-output` instead.
CMD ["run"]

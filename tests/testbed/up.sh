#!/usr/bin/env bash
# Bring up the batchbridge test bed: every component, in order.
#
# usage: up.sh [COMPONENT...]     (default: all components)
#
# Each component is tests/testbed/<name>.sh and understands up|down|status: those lib.sh
# lists, then helm and image.
# Connection facts end up under $BATCHBRIDGE_TESTBED_DIR
# (default /var/lib/batchbridge-testbed), e.g. ssh/facts.json.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

choose_components "$@"
# The helm client (helm.sh; nothing to start, only a binary to build once) comes after the
# services: the tests of the operator's chart render with it and validate against kube.
# Then the image's runtime stage as a root filesystem (image.sh; nothing to start either,
# built once and again when the Dockerfile's runtime stage changes), in which
# batchbridge-operator/tests/image_runtime.rs runs the operator binary.
if (($# == 0)); then
    for extra in helm image; do
        [[ " ${COMPONENTS[*]} " == *" $extra "* ]] || COMPONENTS+=("$extra")
    done
fi

# SeaweedFS's first build (about 9 minutes of compiling) needs nothing the others install:
# it starts now and overlaps their downloads, installs and daemon waits; its `up` in the
# loop below waits for it (the component's lock) and finds weed built.
weed_build=""
if [[ " ${COMPONENTS[*]} " == *" seaweedfs "* ]]; then
    bash "$HERE/seaweedfs.sh" build &
    weed_build=$!
fi

for component in "${COMPONENTS[@]}"; do
    [[ -f "$HERE/$component.sh" ]] || die "unknown test bed component: $component"
    log "up: $component"
    bash "$HERE/$component.sh" up
done
# Its `up` has succeeded by now (building weed itself had this build failed).
[[ -z "$weed_build" ]] || wait "$weed_build" || true
log "test bed up: ${COMPONENTS[*]}"

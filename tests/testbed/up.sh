#!/usr/bin/env bash
# Bring up the batchbridge test bed: every component, in order.
#
# usage: up.sh [COMPONENT...]     (default: all components)
#
# Each component is tests/testbed/<name>.sh and understands up|down|status: those lib.sh
# lists, then helm.
# Connection facts end up under $BATCHBRIDGE_TESTBED_DIR
# (default /var/lib/batchbridge-testbed), e.g. ssh/facts.json.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

choose_components "$@"
# The helm client (helm.sh; nothing to start, only a binary to build once) comes after the
# services: the tests of the operator's chart render with it and validate against kube.
if (($# == 0)) && [[ " ${COMPONENTS[*]} " != *" helm "* ]]; then
    COMPONENTS+=(helm)
fi

for component in "${COMPONENTS[@]}"; do
    [[ -f "$HERE/$component.sh" ]] || die "unknown test bed component: $component"
    log "up: $component"
    bash "$HERE/$component.sh" up
done
log "test bed up: ${COMPONENTS[*]}"

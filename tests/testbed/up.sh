#!/usr/bin/env bash
# Bring up the batchbridge test bed: every component, in order.
#
# usage: up.sh [COMPONENT...]     (default: all components)
#
# Each component is tests/testbed/<name>.sh and understands up|down|status.
# Connection facts end up under $BATCHBRIDGE_TESTBED_DIR
# (default /var/lib/batchbridge-testbed), e.g. ssh/facts.json.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

choose_components "$@"

for component in "${COMPONENTS[@]}"; do
    [[ -f "$HERE/$component.sh" ]] || die "unknown test bed component: $component"
    log "up: $component"
    bash "$HERE/$component.sh" up
done
log "test bed up: ${COMPONENTS[*]}"

#!/usr/bin/env bash
# Stop the batchbridge test bed: every component, in reverse order.
# Generated keys, passwords and facts files are kept.
#
# usage: down.sh [COMPONENT...]   (default: all components)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

choose_components "$@"

rc=0
for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    component="${COMPONENTS[i]}"
    if [[ ! -f "$HERE/$component.sh" ]]; then
        log "unknown test bed component: $component"
        rc=1
        continue
    fi
    log "down: $component"
    bash "$HERE/$component.sh" down || rc=1
done
exit "$rc"

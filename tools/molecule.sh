#!/usr/bin/env bash
# Run a Molecule scenario of this repository without touching $HOME or the system's Ansible configuration.
#
#   tools/molecule.sh SCENARIO [MOLECULE_COMMAND...]      (default command: test)
#   tools/molecule.sh local                 tier 1: host aliases on 127.0.x.N under supervisord
#   tools/molecule.sh systemd               tier 2: systemd-nspawn hosts in network namespaces (root)
#   tools/molecule.sh local converge        keep the cluster up; `tools/molecule.sh local destroy` ends it
#
# It makes a scratch HOME (ANSIBLE_HOME inside it), a collection path in which ansible_collections/spur/cluster
# is this checkout's collection/, and puts the venv's bin/ first on PATH (Molecule calls ansible-config).
# Environment: SPUR_VENV (default .venv), SPUR_MOLECULE_SCRATCH (default: one per scenario under /tmp, kept
# between calls so converge / verify / destroy see the same state), SPUR_RELEASE_SRC (a release directory;
# the scenario builds one otherwise).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SPUR_VENV:-$ROOT/.venv}
SCENARIO=${1:?usage: tools/molecule.sh SCENARIO [MOLECULE_COMMAND...]}
shift
[[ $# -gt 0 ]] || set -- test

if [[ ! -x $VENV/bin/molecule ]]; then
    echo "molecule.sh: $VENV/bin/molecule not found; install the test tools (make setup)" >&2
    exit 2
fi

SCRATCH=${SPUR_MOLECULE_SCRATCH:-/tmp/spur-molecule-$SCENARIO}
mkdir -p "$SCRATCH/home" "$SCRATCH/collections/ansible_collections/spur"
ln -sfn "$ROOT/collection" "$SCRATCH/collections/ansible_collections/spur/cluster"

export HOME=$SCRATCH/home
export ANSIBLE_HOME=$HOME/.ansible
export ANSIBLE_COLLECTIONS_PATH=$SCRATCH/collections
export ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}
export PATH=$VENV/bin:$PATH
# Short paths: unix sockets below the hosts' trees must fit in 107 bytes.
export SPUR_LOCAL_ROOT=${SPUR_LOCAL_ROOT:-$SCRATCH/h}
export SPUR_TESTHOSTS_DIR=${SPUR_TESTHOSTS_DIR:-$SCRATCH/t}

cd "$ROOT"
exec molecule "$@" --scenario-name "$SCENARIO"

#!/usr/bin/env bash
# Run `ansible-test sanity` on the spur.cluster collection, offline-safe, without touching $HOME or the checkout.
#
# ansible-test needs the collection at a path ending in ansible_collections/<namespace>/<name> inside a git work
# tree, so a copy goes to a scratch directory that is made one. It also bootstraps pip in the virtual
# environments it creates by downloading a get-pip script from a host this machine cannot reach, and it runs pip
# with PIP_CONFIG_FILE=/dev/null, which hides the machine's package index: a stand-in script in its cache
# installs the pip it wants from that pip's own wheel (fetched once) and from the configured index instead.
#
# Usage: tools/ansible_sanity.sh [ansible-test sanity options, e.g. --test validate-modules]
# Environment: SPUR_VENV (default .venv of the checkout), SPUR_SANITY_KEEP=1 keeps the scratch directory.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SPUR_VENV:-$ROOT/.venv}
PYTHON_VERSION=3.11

if [[ ! -x $VENV/bin/ansible-test ]]; then
    echo "ansible_sanity: $VENV/bin/ansible-test not found; run 'make setup' (ansible-core is a test extra)" >&2
    exit 2
fi

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/spur-sanity.XXXXXX")
cleanup() {
    if [[ ${SPUR_SANITY_KEEP:-0} == 1 ]]; then
        echo "ansible_sanity: kept $SCRATCH" >&2
    else
        rm -rf "$SCRATCH"
    fi
}
trap cleanup EXIT

COLLECTION=$SCRATCH/ansible_collections/spur/cluster
mkdir -p "$COLLECTION"
# Only what git would ship: tracked files plus new ones that are not ignored (no tests/output, no caches).
(cd "$ROOT/collection" && git ls-files -z --cached --others --exclude-standard . |
    xargs -0 -I{} sh -c '[ -e "{}" ] && printf "%s\0" "{}" || true' |
    tar --null -T - -cf -) | (cd "$COLLECTION" && tar -xf -)

git -C "$SCRATCH" init -q
git -C "$SCRATCH" add -A

export HOME=$SCRATCH/home
mkdir -p "$HOME/.ansible/test/cache"
# The pip version ansible-test bootstraps (get_pip_<version>.py is what it looks for in its cache).
PIP_VERSION=$("$VENV/bin/python" -c '
from ansible_test._internal.python_requirements import get_venv_packages
from ansible_test._internal.host_configs import NativePythonConfig
print(get_venv_packages(NativePythonConfig(version="'"$PYTHON_VERSION"'"))["pip"])
' 2>/dev/null || echo 24.2)
# That pip's wheel, fetched once: each sanity test's venv then installs it by running pip from the wheel itself,
# instead of seeding an older pip and setuptools with ensurepip and upgrading (about 4 s of each of 8 venvs).
WHEELS=$HOME/.ansible/test/cache/wheels
"$VENV/bin/python" -m pip download --no-deps --quiet -d "$WHEELS" "pip==$PIP_VERSION" >&2 || true
# The stand-in for get-pip-<version>.py: the pip install it was asked for (less get-pip's own flags), with the
# machine's pip configuration visible again; ensurepip first only when the wheel could not be fetched.
cat > "$HOME/.ansible/test/cache/get_pip_stand_in.py" <<PY
"""Stand-in for pip's get-pip.py: install what it was asked for with pip $PIP_VERSION run from its wheel."""
import glob
import os
import subprocess
import sys

wheels = glob.glob("$WHEELS/pip-$PIP_VERSION-*.whl")
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
env = {k: v for k, v in os.environ.items() if k != "PIP_CONFIG_FILE"}
if wheels:
    pip = [sys.executable, wheels[0] + "/pip", "install", "--find-links", "$WHEELS"]
else:
    import ensurepip

    ensurepip.bootstrap(upgrade=True)
    pip = [sys.executable, "-m", "pip", "install"]
if args:
    sys.exit(subprocess.call([*pip, *args], env=env))
PY
mv "$HOME/.ansible/test/cache/get_pip_stand_in.py" "$HOME/.ansible/test/cache/get_pip_${PIP_VERSION//./_}.py"

cd "$COLLECTION"
export PATH=$VENV/bin:$PATH
export ANSIBLE_HOME=$HOME/.ansible
echo "ansible_sanity: ansible-test sanity --python $PYTHON_VERSION in $COLLECTION" >&2
ansible-test sanity --python "$PYTHON_VERSION" --requirements --color no "$@"

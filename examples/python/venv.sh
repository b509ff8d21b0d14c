#!/usr/bin/env bash
# Creates (or refreshes) the virtual environment of the Python examples, examples/python/.venv,
# with the pinned requirements.txt, and prints its interpreter's path. The environment is kept:
# it is rebuilt only when requirements.txt changes (its hash is stamped inside), so only the
# first run needs PyPI. Used by examples/examples_test.go and .ci/run; needs python3 with the
# venv module (Debian and Ubuntu: apt-get install python3-venv).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
stamp="$venv/ckf-requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "examples: installing requirements.txt into $venv" >&2
  python3 -m venv --clear "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"

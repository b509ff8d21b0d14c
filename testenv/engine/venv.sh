#!/usr/bin/env bash
# venv.sh: make (once) the Python virtual environment the engine emulator runs in, and print the
# path of its python on stdout.
#
# The environment lives in $CKF_ENGINE_VENV (default testenv/engine/.venv, ignored by git) and is
# rebuilt when requirements.txt changes (a stamp holds the file's digest), so a fresh clone, CI and
# a developer's machine all get the pinned pyzmq and msgspec from PyPI with pip. Needs python3
# with the venv module (Debian: python3-venv); .ci/run installs it when missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${CKF_ENGINE_VENV:=$here/.venv}"
req="$here/requirements.txt"
want="$(sha256sum "$req" | cut -d' ' -f1)"
stamp="$CKF_ENGINE_VENV/.requirements.sha256"
py="$CKF_ENGINE_VENV/bin/python"

if [[ -x "$py" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$py"
  exit 0
fi

# Several test binaries may ask at once: one builds, the others wait for it.
mkdir -p "$(dirname "$CKF_ENGINE_VENV")"
exec 9>"$CKF_ENGINE_VENV.lock"
flock 9
if [[ -x "$py" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$py"
  exit 0
fi
command -v python3 >/dev/null || { echo "venv.sh: python3 not found" >&2; exit 1; }
echo "venv.sh: installing the engine emulator's requirements into $CKF_ENGINE_VENV" >&2
rm -rf "$CKF_ENGINE_VENV"
python3 -m venv "$CKF_ENGINE_VENV" >&2
"$py" -m pip install --disable-pip-version-check -q -r "$req" >&2
echo "$want" > "$stamp"
echo "$py"

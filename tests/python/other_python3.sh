#!/usr/bin/env bash
# With a python3 other than Debian's first on PATH (pyenv, conda, a venv: no
# python3-gi, no numpy), `python3 examples/python/EXAMPLE.py` as the README says failed with "No
# module named 'numpy'". It now runs under /usr/bin/python3 and says so. The stand-in python3 here
# is Debian's without its site-packages (-S), which has neither.
# usage: other_python3.sh EXAMPLE.py
set -euo pipefail
[ -x /usr/bin/python3 ] || { echo "SKIPPED LOUDLY: no /usr/bin/python3"; exit 77; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/prism-python3.XXXXXX")
trap 'rm -rf "$dir"' EXIT
printf '#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n' >"$dir/python3"
chmod +x "$dir/python3"
if PATH="$dir:$PATH" python3 -c 'import numpy' 2>/dev/null; then
  echo "other_python3: FAIL: the stand-in python3 has numpy"; exit 1
fi
PATH="$dir:$PATH" python3 "$1" >"$dir/out.txt" 2>&1 || { cat "$dir/out.txt"; echo "other_python3: FAIL: $1 exited $?"; exit 1; }
grep -q "has no numpy: running it with /usr/bin/python3" "$dir/out.txt" || { cat "$dir/out.txt"; echo "other_python3: FAIL: no note of the switch"; exit 1; }
grep -q ": OK" "$dir/out.txt" || { cat "$dir/out.txt"; echo "other_python3: FAIL: the example did not finish"; exit 1; }
echo "other_python3: OK: $(head -1 "$dir/out.txt")"

#!/usr/bin/env bash
# `cpack` (CMakeLists.txt: a DEB of the install with the prefix /usr) into a temporary folder, then
# the package's contents and control fields as dpkg-deb reads them.
# usage: package_test.sh BUILD_DIR PLUGINDIR PYTHONDIR   (PYTHONDIR empty: the module is not built)
set -euo pipefail
build=$1 plugindir=$2 pydir=$3
out=$(mktemp -d "${TMPDIR:-/tmp}/prism-package.XXXXXX")
trap 'rm -rf "$out"' EXIT
fail() { echo "package_test: FAIL: $*"; exit 1; }

(cd "$build" && cpack -G DEB -B "$out" >"$out/cpack.log" 2>&1) || { cat "$out/cpack.log"; fail "cpack"; }
deb=$(ls "$out"/prism_*_amd64.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { cat "$out/cpack.log"; fail "no prism_*_amd64.deb"; }
echo "$(basename "$deb"): $(stat -c %s "$deb") bytes"
files=$(dpkg-deb -c "$deb" | awk '{print $6}')
want=(./usr/bin/prism "./usr/$plugindir/libgstprism.so" ./usr/share/doc/prism/README.md ./usr/share/prism/configs/demo.yaml)
[ -n "$pydir" ] && want+=("./usr/$pydir/")
for f in "${want[@]}"; do
  grep -q "^${f//./\\.}" <<<"$files" || fail "the package has no $f"
done
! grep -q 'prism-texture-eval' <<<"$files" || fail "the package has prism-texture-eval (evaluation/ is not packaged)"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for d in libgstreamer1.0-0 libopencv-core406 gstreamer1.0-plugins-base; do
  grep -q "$d" <<<"$depends" || fail "Depends lacks $d"
done
[ -z "$pydir" ] || grep -q "python3 (>= 3\." <<<"$depends" || fail "Depends lacks python3"
echo "package_test: OK"

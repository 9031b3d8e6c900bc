#!/usr/bin/env bash
# `cmake --install` into a fresh temporary prefix, then what a user runs from there: the CLI
# (prism --version, prism --help), the plugin through gst-inspect-1.0 --gst-plugin-path (and from
# nowhere else: GST_PLUGIN_PATH unset, a fresh registry), the Python module, the docs.
# usage: install_test.sh BUILD_DIR PLUGINDIR PYTHONDIR PYTHON   (dirs relative to the prefix; an
# empty PYTHON: the module is not built)
set -euo pipefail
build=$1 plugindir=$2 pydir=$3 python=${4:-}
prefix=$(mktemp -d "${TMPDIR:-/tmp}/prism-install.XXXXXX")
trap 'rm -rf "$prefix"' EXIT
fail() { echo "install_test: FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$prefix/install.log" 2>&1 || { cat "$prefix/install.log"; fail "cmake --install"; }
echo "installed into $prefix:"; (cd "$prefix" && find . -type f -not -path './share/doc/*' -not -name install.log | sort)

[ -x "$prefix/bin/prism" ] || fail "no bin/prism"
# The evaluation tools (evaluation/) measure the product and are not part of it.
! find "$prefix" -name 'prism-texture-eval*' | grep -q . || fail "prism-texture-eval is installed (evaluation/ is not)"
version=$("$prefix/bin/prism" --version) || fail "prism --version exited $?"
echo "$version"
[[ "$version" == "prism "* ]] || fail "prism --version printed '$version'"
"$prefix/bin/prism" --help | grep -q "texture" || fail "prism --help does not list the commands"

[ -f "$prefix/$plugindir/libgstprism.so" ] || fail "no $plugindir/libgstprism.so"
export GST_REGISTRY_1_0="$prefix/registry.bin"
unset GST_PLUGIN_PATH GST_PLUGIN_PATH_1_0
for element in prismconvert poissonblend emdtracker textureid; do
  out=$(gst-inspect-1.0 --gst-plugin-path="$prefix/$plugindir" "$element" 2>&1) || { echo "$out"; fail "gst-inspect-1.0 $element"; }
  grep -q "Filename *$prefix/$plugindir/libgstprism.so" <<<"$out" || { echo "$out" | head -20; fail "$element not loaded from the prefix"; }
done
echo "gst-inspect-1.0 --gst-plugin-path=$prefix/$plugindir: the elements load from the prefix"

# The installed prism loaded the build tree's plugin while the build folder existed; the
# configs were not installed; --print could not be pasted (no output folder, no plugin path).
[ -f "$prefix/share/prism/configs/demo.yaml" ] || fail "no share/prism/configs/demo.yaml"
"$prefix/bin/prism" inspect >"$prefix/inspect.txt" 2>&1 || { cat "$prefix/inspect.txt"; fail "prism inspect"; }
grep -q "file: $prefix/$plugindir/libgstprism.so" "$prefix/inspect.txt" ||
  { cat "$prefix/inspect.txt"; fail "the installed prism did not load the installed plugin"; }
"$prefix/bin/prism" run "$prefix/share/prism/configs/demo.yaml" --set frames=3 --set conv.device=cpu \
  --set "out=$prefix/run/%04d.png" >"$prefix/run.txt" 2>&1 || { cat "$prefix/run.txt"; fail "prism run demo.yaml"; }
[ "$(ls "$prefix/run" | wc -l)" = 3 ] || { cat "$prefix/run.txt"; fail "prism run of demo.yaml wrote $(ls "$prefix/run" | wc -l) frames, not 3"; }
printed=$("$prefix/bin/prism" run "$prefix/share/prism/configs/demo.yaml" --print --set frames=3 --set conv.device=cpu \
  --set "out=$prefix/pasted/%04d.png") || fail "prism run --print"
grep -q "GST_PLUGIN_PATH=$prefix/$plugindir " <<<"$printed" || fail "--print names no installed plugin folder: $printed"
sh -c "$printed" >"$prefix/pasted.txt" 2>&1 || { cat "$prefix/pasted.txt"; fail "the --print command: $printed"; }
[ "$(ls "$prefix/pasted" | wc -l)" = 3 ] || fail "the pasted --print command wrote $(ls "$prefix/pasted" | wc -l) frames, not 3"
echo "installed: prism loads its own plugin, runs its own demo.yaml, and its --print command runs as pasted"

if [ -n "$python" ]; then
  PYTHONPATH="$prefix/$pydir" "$python" -c "
import prism, sys
assert prism.__file__.startswith(sys.argv[1]), prism.__file__
print('python: import prism', prism.__version__, 'from', prism.__file__)" "$prefix" || fail "the Python module"
fi

for doc in README.md docs/ARCHITECTURE.md examples/python/texture_gallery.py; do
  [ -f "$prefix/share/doc/prism/$doc" ] || fail "no share/doc/prism/$doc"
done
echo "install_test: OK"

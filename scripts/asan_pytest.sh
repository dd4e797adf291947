#!/usr/bin/env bash
# Runs the pytest suites against a build of the extension (C runtime,
# kernels and C++ glue) instrumented with AddressSanitizer and
# UndefinedBehaviorSanitizer. Not part of CI (it builds a second time);
# run it after changes to csrc/ or src/runtime/.
#
# The build happens in a temporary copy of the tree, so the normal build
# in torch_tpu/ is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. .venv/bin/activate
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git ls-files -z | xargs -0 cp --parents -t "$work"
cd "$work"
SAN="-fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize=vptr"
CFLAGS="$SAN" LDFLAGS="-fsanitize=address,undefined" MAX_JOBS=${MAX_JOBS:-2} \
  python setup.py -q build_clib build_ext --inplace > build.log 2>&1 || { tail -50 build.log; exit 1; }
# Python itself is not instrumented: preload the runtimes, and skip leak
# reports (the interpreter keeps memory until exit by design).
ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
  python -m pytest -q tests -p no:cacheprovider "$@"

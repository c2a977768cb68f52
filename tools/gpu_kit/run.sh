#!/usr/bin/env bash
# The one command to type on a GPU node without a package index (CONTRIBUTING.md "On a GPU"):
#
#     bash tools/gpu_kit/run.sh RESULTS_DIR
#
# from the root of a checkout that holds the kit (.gpu-kit/, built by `nox -s gpu_kit` on a
# machine with the index). It installs the kit offline on top of this machine's own Python,
# torch and transformers (pip --no-index --no-deps --target: nothing is fetched, nothing of
# the machine's is replaced), then runs tools/gpu_kit/checks.py: one line per check, and
# RESULTS_DIR/summary.json plus each check's log. The whole script, the install included,
# ends within GPU_KIT_LIMIT_S seconds (default 540, 9 minutes). Without CUDA it runs the
# smoke check on the CPU and says that it skipped the rest.
#
# Settings: GPU_KIT_DIR (default .gpu-kit), GPU_KIT_SITE (where the kit is installed,
# default /tmp/gpu-kit-site), GPU_KIT_LIMIT_S, PYTHON (default python3), GPU_KIT_CHECKS
# (a comma-separated subset of smoke,rollout,learning,docs,perf; default all but perf, which
# measures at a real shape and is run on its own: GPU_KIT_CHECKS=smoke,perf GPU_KIT_LIMIT_S=570).
set -uo pipefail
if [ $# -ne 1 ]; then
  echo "usage: bash tools/gpu_kit/run.sh RESULTS_DIR" >&2
  exit 2
fi
start=$(date +%s)
cd "$(dirname "$0")/../.."
results=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "cannot make $1" >&2; exit 2; }
limit_s=${GPU_KIT_LIMIT_S:-540}
kit=${GPU_KIT_DIR:-.gpu-kit}
site=${GPU_KIT_SITE:-/tmp/gpu-kit-site}
python=${PYTHON:-python3}
if ! ls "$kit"/*.whl >/dev/null 2>&1; then
  echo "no wheels in $kit: build the kit first with 'nox -s gpu_kit' on a machine with a package index" >&2
  exit 2
fi
echo "installing the kit ($(ls "$kit"/*.whl | wc -l) wheels from $kit) into $site"
rm -rf "$site"
if ! "$python" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
    --disable-pip-version-check --target "$site" "$kit"/*.whl >"$results/install.log" 2>&1; then
  echo "install: FAIL"; cat "$results/install.log"; exit 1
fi
rm -f "$results/install.log"
# The checkout first: run.sh checks this tree (the kit also holds it as a wheel, built from
# the same tree, for use outside a checkout).
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# checks.py keeps to the deadline itself; timeout is the backstop if it cannot.
deadline=$((start + limit_s))
timeout --kill-after=10 $((deadline - $(date +%s) + 5)) \
  "$python" tools/gpu_kit/checks.py "$results" --deadline "$deadline" \
  ${GPU_KIT_CHECKS:+--only "$GPU_KIT_CHECKS"}
status=$?
ray stop --force >/dev/null 2>&1 || true
echo "run.sh: exit $status after $(( $(date +%s) - start )) s (limit $limit_s s); results in $results"
exit $status

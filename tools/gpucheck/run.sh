#!/usr/bin/env bash
# gobn's GPU check bundle: correctness (cuda.test, the Go tests of
# kernels/cuda built as a binary: every CUDA kernel against gobn's CPU
# kernels and a float64 reference), compute-sanitizer on its small subset
# (memcheck, racecheck, synccheck), speed (bench.py), then one results JSON
# and a short summary.
#
#   bash build/gpu/run.sh            (make gpu-bundle builds build/gpu; any cwd)
#
# Results go to $OUT if set, else results/ beside this script: results.json,
# summary.txt, check.json, check.log, sanitize.log, bench.json, bench.log.
# Exit status: 0 all passed, 1 something failed, 2 incomplete (a step timed
# out, a sanitizer could not run, or the check skipped groups for time).
#
# Environment:
#   PYTHON                python with PyTorch, for bench.py (default python3)
#   GPUCHECK_DEADLINE_S   the whole run's target, seconds (default 390)
#   GPUCHECK_SANITIZERS   tools to run (default "memcheck racecheck synccheck";
#                         "" runs none; initcheck may be added)
#   GPUCHECK_QUICK=1      bench.py --quick
#   COMPUTE_SANITIZER     the compute-sanitizer binary (default: on PATH, else CUDA's usual places)
#   GPUCHECK_SANITIZER_OPTS  more compute-sanitizer options (default "--report-api-errors no")
#   CHECK_ARGS, BENCH_ARGS  extra arguments for cuda.test (-gpucheck.filter RE,
#                         -gpucheck.no-huge, ...: ./cuda.test -help) and bench.py
#   GPUCHECK_BEFORE_BENCH a command run before the speed step, e.g. one that waits
#                         for other work on the GPU to end so that bench.py has the
#                         GPU alone; its time does not count toward the deadline
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RES=${OUT:-$HERE/results}
mkdir -p "$RES"
RES=$(cd "$RES" && pwd)
PY=${PYTHON:-python3}
DEADLINE=${GPUCHECK_DEADLINE_S:-390}
SANITIZERS=${GPUCHECK_SANITIZERS-memcheck racecheck synccheck}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export PYTHONUNBUFFERED=1
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
# cap a log at 4 MiB (head and tail kept), so that every file comes back
cap() {
	local f=$1 max=$((4 << 20))
	if [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt "$max" ]; then
		{ head -c $((max / 2)) "$f"; printf '\n... [cut] ...\n'; tail -c $((max / 2)) "$f"; } > "$f.cut"
		mv "$f.cut" "$f"
	fi
}
steps=$TMP/steps.jsonl
: > "$steps"
step() { # name status rc seconds [detail]
	printf '{"step":"%s","status":"%s","rc":%s,"seconds":%s,"detail":"%s"}\n' "$1" "$2" "$3" "$4" "${5:-}" >> "$steps"
}
# ended name rc start log: records a step that exited with rc (124: timed
# out) since start, and caps its log
ended() {
	local st=fail
	case $2 in 0) st=pass ;; 124) st=timeout ;; esac
	step "$1" "$st" "$2" $(( $(date +%s) - $3 ))
	cap "$4"
}

echo "== gobn GPU check: $(date -u +%FT%TZ), bundle $HERE, results $RES"
{
	nvidia-smi -L 2>&1 || echo "nvidia-smi: not found"
	"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())' 2>&1
} | tee "$RES/check.log"

# 1. correctness: every test of kernels/cuda, TestGPU with every case
# (-gpucheck.require: no GPU is a failure, not a skip; no ResNet-50 group,
# nor the tensor over 2^31 elements, starts after 30% of the deadline)
t=$(date +%s)
rm -f "$RES/check.json"
timeout -k 10 $(( DEADLINE / 2 )) "$HERE/cuda.test" -test.v -test.timeout 0 -gpucheck.require \
	-gpucheck.json "$RES/check.json" -gpucheck.max-seconds $(( DEADLINE * 3 / 10 )) ${CHECK_ARGS:-} 2>&1 \
	| tee -a "$RES/check.log"
ended check "${PIPESTATUS[0]}" "$t" "$RES/check.log"

# 2. compute-sanitizer on TestGPU's small groups (-gpucheck.small): no
# guard elements, each tensor its own exact-size cuMemAlloc, so that
# memcheck sees every byte past one; only gobn's kernels are instrumented.
: > "$RES/sanitize.log"
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
if [ -z "$CS" ]; then
	for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
		/usr/local/cuda-*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer; do
		if [ -x "$c" ]; then CS=$c; break; fi
	done
fi
ntools=$(echo $SANITIZERS | wc -w)
# CUDA API calls that fail are not reported by default: gobn's failures
# surface in the test as errors
SAN_OPTS=${GPUCHECK_SANITIZER_OPTS---report-api-errors no}
for tool in $SANITIZERS; do
	t=$(date +%s)
	if [ -z "$CS" ]; then
		step "sanitize-$tool" unavailable 127 0 "compute-sanitizer not found"
		echo "compute-sanitizer --tool $tool: unavailable (not found)"
		continue
	fi
	# leave 130 s for the benchmark; share the rest among the tools left
	left=$(( (DEADLINE - 130 - $(elapsed)) / ntools ))
	ntools=$(( ntools - 1 ))
	[ "$left" -lt 40 ] && left=40
	log=$TMP/$tool.log
	run_san() {
		timeout -k 10 "$left" "$CS" --tool "$tool" "$@" --error-exitcode 99 --print-limit 30 \
			"$HERE/cuda.test" -test.run '^TestGPU$' -test.v -test.timeout 0 -gpucheck.require -gpucheck.small \
			-gpucheck.json "$TMP/san_$tool.json" > "$log" 2>&1
	}
	# option groups this compute-sanitizer may not know are dropped, last first
	groups=("--kernel-name kns=gobn")
	[ -n "$SAN_OPTS" ] && groups+=("$SAN_OPTS")
	while :; do
		# shellcheck disable=SC2068 # each group splits into its words
		run_san ${groups[@]}
		rc=$?
		if [ ${#groups[@]} -gt 0 ] && grep -qiE "unrecognized option|unknown option|invalid (value|option)|bad option" "$log"; then
			echo "(compute-sanitizer refused an option: dropping '${groups[${#groups[@]}-1]}')" >> "$RES/sanitize.log"
			unset 'groups[${#groups[@]}-1]'
			continue
		fi
		break
	done
	{ echo "===== compute-sanitizer --tool $tool: rc $rc, $(( $(date +%s) - t )) s"; cat "$log"; } >> "$RES/sanitize.log"
	if [ "$tool" = racecheck ]; then
		summary=$(grep -oE "RACECHECK SUMMARY: [0-9]+ hazards?" "$log" | tail -n 1)
	else
		summary=$(grep -oE "ERROR SUMMARY: [0-9]+ errors?" "$log" | tail -n 1)
	fi
	count=$(echo "$summary" | grep -oE "[0-9]+" | head -n 1)
	if grep -qE "Device not supported|not supported on this (device|platform)" "$log"; then
		st=unavailable
	elif [ "$rc" = 124 ]; then
		st=timeout
	elif [ -z "$summary" ]; then
		st=fail # no summary: the sanitizer or the program broke
	elif [ "$count" != 0 ] || [ "$rc" = 99 ]; then
		st=fail
	elif [ "$rc" != 0 ]; then
		st=fail # the sanitizer was clean but the check failed (see the log)
	else
		st=pass
	fi
	step "sanitize-$tool" "$st" "$rc" $(( $(date +%s) - t )) "${summary:-no summary}"
	echo "compute-sanitizer --tool $tool: $st (${summary:-no summary}, rc $rc)"
done
cap "$RES/sanitize.log"

# 3. speed: the full set when the time allows, else --quick
if [ -n "${GPUCHECK_BEFORE_BENCH:-}" ]; then
	t=$(date +%s)
	echo "== before bench.py: $GPUCHECK_BEFORE_BENCH"
	bash -c "$GPUCHECK_BEFORE_BENCH"
	T0=$(( T0 + $(date +%s) - t ))
fi
t=$(date +%s)
left=$(( DEADLINE - $(elapsed) ))
# the timed rounds take --budget-s; setting up, warming up and starting
# take about 20 s more (the full set) or 10 s (--quick)
bargs="--budget-s $(( left - 80 > 60 ? 60 : left - 80 ))"
if [ "${GPUCHECK_QUICK:-0}" = 1 ] || [ "$left" -lt 120 ]; then
	bargs="--quick --budget-s $(( left - 50 > 20 ? 20 : (left - 50 < 5 ? 5 : left - 50) ))"
fi
echo "== bench.py $bargs ${BENCH_ARGS:-} ($(elapsed) s so far)"
timeout -k 10 $(( left > 90 ? left : 90 )) "$PY" "$HERE/bench.py" --json "$RES/bench.json" $bargs ${BENCH_ARGS:-} 2>&1 \
	| tee "$RES/bench.log"
ended bench "${PIPESTATUS[0]}" "$t" "$RES/bench.log"

# 4. one results JSON, and the summary last
"$PY" "$HERE/summarize.py" --results "$RES" --steps "$steps" --sanitize-dir "$TMP" --elapsed "$(elapsed)"

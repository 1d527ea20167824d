#!/usr/bin/env bash
# Lockdep over real programs: each runs under `locklab run --lockdep --lockdep-out`, once without
# lockdep for its time, and one line says what lockdep saw (processes, reports by kind, time with
# and without). The reports themselves are kept in the output folder (one JSON per program) for a
# verdict on each: a real potential deadlock (the two paths, and why they can meet) or a false one.
#
# Usage: .ci/lockdep-sweep.sh [--quick] [OUT_DIR]   (installs what it needs with apt-get; --quick
# runs the short programs only, ~2 minutes, as CI does). Exit 1 if any program failed under lockdep
# where it passed without it, or if a program listed as report-free reported.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
out=${1:-target/lockdep-sweep}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export DEBIAN_FRONTEND=noninteractive
pkgs=(rocksdb-tools libglib2.0-tests python3.11 libpython3.11-testsuite tokyocabinet-bin
  kyotocabinet-utils g++)
[ "$quick" = 1 ] || pkgs+=(mariadb-server mariadb-client)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  (apt-get update -qq && apt-get install -y -qq "${missing[@]}") >/dev/null 2>&1 \
    || { echo "lockdep sweep: could not install ${missing[*]}"; exit 1; }
fi
cargo build --release -q -p locklab-bench || exit 1
locklab=$PWD/target/release/locklab
g++ -std=c++17 -O2 -pthread -o "$out/lockdep_objects" crates/locklab-pthread/tests/c/lockdep_objects.cpp || exit 1

bad=0
printf '%-34s %5s %9s %9s  %s\n' program procs "s plain" "s lockdep" "reports"
# sweep NAME MUST_BE_CLEAN CMD...: MUST_BE_CLEAN=1 fails the sweep on any report.
sweep() {
  local name=$1 clean=$2; shift 2
  local work="$out/work-$name"
  rm -rf "$work"; mkdir -p "$work"
  local t0=$SECONDS
  (cd "$work" && timeout 600 "$@" >"$out/$name.plain.log" 2>&1)
  local plain_rc=$? plain_s=$((SECONDS - t0))
  rm -rf "$work"; mkdir -p "$work"
  t0=$SECONDS
  (cd "$work" && timeout 900 "$locklab" run --lockdep --lockdep-out "$out/$name.json" -- "$@" \
    >"$out/$name.log" 2>&1)
  local rc=$? s=$((SECONDS - t0))
  local summary
  summary=$(python3 - "$out/$name.json" <<'EOF'
import collections, json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("- no JSON (%s)" % e.__class__.__name__); sys.exit()
kinds = collections.Counter(r.get("kind", "?") for r in d.get("reports", []))
print(d.get("processes", "?"), ", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items())) or "none")
EOF
)
  printf '%-34s %5s %9s %9s  %s\n' "$name" "${summary%% *}" "$plain_s" "$s" "${summary#* }"
  if [ "$plain_rc" != 0 ]; then
    echo "  $name: fails without lockdep too (exit $plain_rc, see $out/$name.plain.log)"; bad=1
  elif [ "$rc" != 0 ]; then
    echo "  $name: exit $rc under lockdep, 0 without (see $out/$name.log)"; bad=1
  fi
  if [ "$clean" = 1 ] && [ "${summary#* }" != none ]; then
    echo "  $name: reports on a program known to be correct (see $out/$name.json)"; bad=1
  fi
}

glib=/usr/libexec/installed-tests/glib
sweep cpp-objects 1 "$out/lockdep_objects" 2000
sweep tchmttest 0 tchmttest write -rnd a.tch 4 20000
sweep tcumttest 0 tcumttest typical 4 20000
sweep kccachetest 0 kccachetest wicked -th 4 20000
sweep rocksdb-db_bench 0 db_bench --benchmarks=fillrandom,readrandom,readwhilewriting,compact \
  --num=20000 --threads=4 --db=db
for t in mutex rec-mutex rwlock cond once thread thread-pool asyncqueue 1bit-mutex bitlock \
  private contexts mainloop cancellable task; do
  [ -x "$glib/$t" ] && sweep "glib-$t" 0 "$glib/$t" -q
done
# Debian's interpreter (its test suite is libpython3.11-testsuite), not whatever `python3` is first
# on the PATH.
sweep python-threading 0 /usr/bin/python3.11 -m test -q test_threading test_queue test_thread \
  test_threading_local test_concurrent_futures
if [ "$quick" = 0 ]; then
  sweep rocksdb-db_bench-long 0 db_bench --benchmarks=fillrandom,readrandom,readwhilewriting,compact \
    --num=200000 --threads=8 --db=db
  sweep python-multiprocessing 0 /usr/bin/python3.11 -m test -q test_multiprocessing_fork
  mariadb_round() {
    mariadb-install-db --no-defaults --auth-root-authentication-method=normal --user=root \
      --datadir="$PWD/data" >/dev/null 2>&1 || return 1
    mariadbd --no-defaults --user=root --datadir="$PWD/data" --socket="$PWD/sock" \
      --skip-networking --pid-file="$PWD/pid" &
    local pid=$!
    for _ in $(seq 60); do [ -S "$PWD/sock" ] && break; sleep 1; done
    mariadb-slap --socket="$PWD/sock" -uroot --concurrency=8 --iterations=3 \
      --number-of-queries=2000 --auto-generate-sql --auto-generate-sql-load-type=mixed
    local rc=$?
    mariadb-admin --socket="$PWD/sock" -uroot shutdown
    wait "$pid"
    return $rc
  }
  export -f mariadb_round
  sweep mariadb 0 bash -c mariadb_round
fi
exit $bad

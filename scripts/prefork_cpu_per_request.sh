#!/bin/bash
# CPU per request of a prefork server with a given number of children: the
# utime+stime of the master and its children over a 5 s wrk run (50 keep-alive
# connections, a 1456-byte page), after a 2 s warm-up that lets the pool grow.
# Used to tell a cost per request from a cost of more processes (docs/benchmarks.md).
#
#   scripts/prefork_cpu_per_request.sh BINARY PORT [serve flags…]
#   scripts/prefork_cpu_per_request.sh target/release/mpm 18001 --start-servers 60
#
# Needs wrk. Prints: binary, flags, requests, CPU µs per request, processes.
set -euo pipefail
BIN=$1; PORT=$2; shift 2
ROOT=$(mktemp -d)
trap 'rm -rf "$ROOT"' EXIT
head -c 1456 /dev/zero | tr '\0' 'x' > "$ROOT/index.html"
"$BIN" serve --mpm prefork --listen "127.0.0.1:$PORT" --docroot "$ROOT" \
    --max-request-workers 256 "$@" 2>/dev/null &
M=$!
sleep 1.5
ticks() {
    local t=0
    for p in $M $(pgrep -P "$M"); do
        for x in $(cut -d' ' -f14,15 "/proc/$p/stat" 2>/dev/null); do t=$((t + x)); done
    done
    echo "$t"
}
wrk -t1 -c50 -d2s "http://127.0.0.1:$PORT/index.html" >/dev/null
t0=$(ticks)
out=$(wrk -t1 -c50 -d5s "http://127.0.0.1:$PORT/index.html")
t1=$(ticks)
n=$(echo "$out" | awk '/requests in/{print $1}')
hz=$(getconf CLK_TCK)
echo "$(basename "$BIN") $* requests=$n cpu_us_per_req=$(python3 -c "print(round(($t1-$t0)*1e6/$hz/$n,1))") processes=$(pgrep -P "$M" | wc -l)"
kill -TERM "$M"
wait "$M" 2>/dev/null || true

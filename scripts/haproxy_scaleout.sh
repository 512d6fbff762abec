#!/usr/bin/env bash
# Scale-out measurement (not a test): N mpm instances behind HAProxy, using
# contrib/haproxy/haproxy.cfg with one `server` line per instance, loaded by
# wrk at each concurrency; one instance alone, direct, is the peer measured
# in the same run. Needs wrk and haproxy (apt-get install wrk haproxy) and a
# release build (cargo build --release -p mpm --bin mpm).
#
#   scripts/haproxy_scaleout.sh [INSTANCES] [SECONDS] [CONNECTIONS...]
#   scripts/haproxy_scaleout.sh 4 10 1000 9000
# HAProxy needs about two descriptors per client connection: MAXCONN
# (default 9900) must stay under half of `ulimit -Hn`.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-4}; secs=${2:-10}; shift 2 || true
conns=("${@:-1000 10000}"); [ $# -eq 0 ] && conns=(1000 10000)
bin=target/release/mpm
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
printf 'scale-out\n' > "$work/index.html"
base=$((20000 + RANDOM % 20000))
servers=""
for i in $(seq 1 "$n"); do
  port=$((base + i))
  "$bin" serve --mpm event --server-limit 2 --listen "127.0.0.1:$port" --docroot "$work" \
    --max-request-workers 256 --drain-delay 2 --backlog 8192 2>"$work/mpm$i.log" &
  pids+=($!)
  servers+="    server mpm$i 127.0.0.1:$port check\n"
done
front=$((base + 100))
# The template, its two server lines replaced by one per instance.
sed -e '/^    server mpm[12] /d' contrib/haproxy/haproxy.cfg > "$work/haproxy.cfg"
printf "$servers" >> "$work/haproxy.cfg"
MPM_FRONTEND="127.0.0.1:$front" MPM_MAXCONN=${MAXCONN:-9900} haproxy -db -f "$work/haproxy.cfg" 2>"$work/haproxy.log" &
pids+=($!)
sleep 3
kill -0 "${pids[-1]}" || { echo "haproxy did not start:"; cat "$work/haproxy.log"; exit 1; }
echo "instances: $n event (2 processes each), HAProxy $(haproxy -v | head -1 | cut -d' ' -f3), $(nproc) cores"
for c in "${conns[@]}"; do
  for target in "haproxy 127.0.0.1:$front" "direct 127.0.0.1:$((base + 1))"; do
    set -- $target
    ( sleep $((secs / 2)); ss -Htn state established "( sport = :$((base + 1)) or sport = :$((base + 2)) or sport = :$((base + 3)) or sport = :$((base + 4)) )" | wc -l > "$work/est" ) &
    out=$(wrk -t2 -c"$c" -d"${secs}s" --timeout 10s "http://$2/index.html" 2>&1)
    wait $! 2>/dev/null || true
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    errs=$(echo "$out" | awk '/Socket errors/ {print $0}' | sed 's/ *Socket errors: //')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
    lat=$(echo "$out" | awk '/Latency/ {print $2}')
    echo "c=$c $1: ${rps:-?} req/s, latency avg ${lat:-?}, errors: ${errs:-none}, non-2xx: ${non2xx:-0}, established server-side connections mid-run: $(cat "$work/est")"
  done
done

# Shell functions both cluster scripts use (deploy/local-cluster.sh, deploy/netns-cluster.sh):
# sourced, never run. The sourcing script defines die() and sets PYTHON, START_TIMEOUT and
# SCRIPT_NAME (the name its messages start with).

# Print COUNT distinct free TCP ports on HOST (all held open until all are chosen).
free_ports_on() {
    "$PYTHON" - "$1" "$2" <<'EOF'
import socket, sys
count, host = int(sys.argv[1]), sys.argv[2]
socks = []
for _ in range(count):
    s = socket.socket()
    s.bind((host, 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Wait until PIDFILE (written by the node NAME's session leader) is there; print the pid.
wait_for_pidfile() {
    local name=$1 pidfile=$2 waited=0
    while [[ ! -s "$pidfile" ]]; do
        sleep 0.1
        waited=$((waited + 1))
        [[ $waited -lt 100 ]] || die "$name: did not start (see $DIR/logs/$name.log)"
    done
    cat "$pidfile"
}

# Wait until the cluster at ADDRESS has WANT alive nodes, or START_TIMEOUT s pass.
# The GCS port must accept connections first: ray.init() would retry for minutes.
wait_for_nodes() {
    local address=$1 want=$2
    timeout --kill-after=10 "$((START_TIMEOUT + 30))" \
        "$PYTHON" - "$address" "$want" "$START_TIMEOUT" "$SCRIPT_NAME" <<'EOF'
import logging, socket, sys, time
address, want, timeout, name = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
deadline = time.monotonic() + timeout
host, port = address.rsplit(":", 1)
while True:
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"{name}: head GCS {address} not reachable: {exc}")
        time.sleep(0.5)
import ray
# On a loaded machine the GCS can miss ray.init's own RPC deadline ("Timed out while
# waiting for GCS to become available") while the cluster is healthy: that is a reason to
# ask again, not to tear the cluster down. Only the overall deadline ends the wait.
alive, last_error = 0, None
while time.monotonic() < deadline:
    try:
        if not ray.is_initialized():
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        alive = sum(1 for n in ray.nodes() if n["Alive"])
    except Exception as exc:  # any failure to reach the GCS: retry until the deadline
        last_error = exc
        ray.shutdown()
    else:
        if alive >= want:
            sys.exit(0)
    time.sleep(0.5)
reason = f"; last error: {str(last_error).splitlines()[-1]}" if last_error else ""
sys.exit(f"{name}: only {alive} of {want} nodes alive after {timeout:g} s{reason}")
EOF
}

# True if PID is alive and still the leader of its own session (not a recycled pid).
is_leader() {
    local pid=$1 sid
    sid=$(ps -o sid= -p "$pid" 2>/dev/null | tr -d ' ') || return 1
    [[ "$sid" == "$pid" ]]
}

# Pids of all processes in session SID (zombies excluded).
session_members() {
    ps -eo pid=,sid=,stat= | awk -v s="$1" '$2 == s && $3 !~ /^Z/ { print $1 }'
}

# Stop the nodes recorded as "name:pid" words in ENTRIES (each pid its session's leader),
# last recorded first (the head was recorded first): SIGTERM to each leader (`ray start
# --block` stops its own processes on it), up to 20 s for their sessions to empty, then
# SIGKILL to whatever is left in them.
stop_sessions() {
    local entry pid member leaders=() waited=0
    for entry in $1; do leaders=("${entry##*:}" "${leaders[@]}"); done
    for pid in "${leaders[@]}"; do
        if is_leader "$pid"; then kill -TERM "$pid" 2>/dev/null || true; fi
    done
    while ((waited < 200)); do
        local left=""
        for pid in "${leaders[@]}"; do left+=$(session_members "$pid"); done
        [[ -n "$left" ]] || break
        sleep 0.1
        waited=$((waited + 1))
    done
    for pid in "${leaders[@]}"; do
        for member in $(session_members "$pid"); do kill -KILL "$member" 2>/dev/null || true; done
    done
}

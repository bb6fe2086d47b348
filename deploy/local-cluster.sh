#!/usr/bin/env bash
# A multi-node Ray cluster on ONE machine: a head and N workers, each a separate raylet
# with its own CPU count and its own custom resource, so that coalloc sees N+1
# heterogeneous nodes (one local manager per node).
#
#   deploy/local-cluster.sh start N [--mhz M0,M1,...,MN] [--dashboard] [--keep-logs]
#   deploy/local-cluster.sh status
#   deploy/local-cluster.sh address        # prints host:port of the head (GCS)
#   deploy/local-cluster.sh env            # prints export lines for clients
#   deploy/local-cluster.sh stop
#
# Nodes:   head      --num-cpus 1     resources {"coalloc_head": 1, "coalloc_mhz": M0}
#          worker i  --num-cpus i+1   resources {"coalloc_node_<i>": 1, "coalloc_mhz": Mi}
# coalloc reads a node's CPU speed from its coalloc_mhz resource. Default speeds:
# 600, 500, 400, 300, 200, 100, 600, ... MHz (head first); --mhz gives all N+1 of them.
#
# Every node runs under its own session (setsid). `stop` ends exactly those sessions:
# SIGTERM to each `ray start --block` leader (which stops its own Ray processes), then
# SIGKILL to whatever is still left in those sessions. It never runs `ray stop`, which
# would kill every Ray process on the machine.
#
# Environment:
#   COALLOC_CLUSTER_DIR   state, logs and Ray temp dir   (default /tmp/coalloc-cluster-<uid>)
#   COALLOC_NODE_IP       address the nodes bind          (default 127.0.0.1)
#   COALLOC_OBJECT_STORE  object store bytes per node     (default 100000000)
#   COALLOC_START_TIMEOUT seconds to wait for all nodes   (default 180)
#   RAY                   the ray CLI                     (default ray)
#   PYTHON                python with ray installed       (default python3)
#   RAY_AUTH_MODE         token or disabled               (default token)
#
# Authentication: Ray >= 2.5x turns token authentication on for a new cluster only when a
# token file (~/.ray/auth_token) happens to exist, so the mode would depend on the
# machine. This script always sets it: token by default (a token is generated if none
# exists). Clients then need RAY_AUTH_MODE=token too: eval "$(deploy/local-cluster.sh env)".
set -Eeuo pipefail

DIR=${COALLOC_CLUSTER_DIR:-/tmp/coalloc-cluster-$(id -u)}
NODE_IP=${COALLOC_NODE_IP:-127.0.0.1}
OBJECT_STORE=${COALLOC_OBJECT_STORE:-100000000}
START_TIMEOUT=${COALLOC_START_TIMEOUT:-180}
RAY=${RAY:-ray}
PYTHON=${PYTHON:-python3}
STATE="$DIR/cluster.env"
# Every ray call below names its address; an inherited RAY_ADDRESS must not redirect it.
unset RAY_ADDRESS
AUTH_MODE=${RAY_AUTH_MODE:-token}
[[ "$AUTH_MODE" == token || "$AUTH_MODE" == disabled ]] ||
    { echo "local-cluster: RAY_AUTH_MODE must be token or disabled, got '$AUTH_MODE'" >&2; exit 2; }
export RAY_AUTH_MODE=$AUTH_MODE
TEMP_DIR="$DIR/ray"

die() { echo "local-cluster: $*" >&2; exit 2; }
SCRIPT_NAME=local-cluster
# shellcheck source=deploy/ray-nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/ray-nodes.sh"

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

# Print COUNT distinct free TCP ports on NODE_IP (all held open until all are chosen).
free_ports() { free_ports_on "$1" "$NODE_IP"; }



# The state file: shell assignments read back by `source`.
write_state() {
    {
        echo "ADDRESS=$ADDRESS"
        echo "TEMP_DIR=$TEMP_DIR"
        echo "PIDS=\"${PIDS# }\""
        echo "DASHBOARD=$DASHBOARD"
        echo "AUTH_MODE=$AUTH_MODE"
    } >"$STATE"
}

load_state() {
    [[ -f "$STATE" ]] || return 1
    # shellcheck disable=SC1090
    source "$STATE"
}

# Start one node in a new session; print the session leader's pid.
# Args: name cpus resources-json extra-args...
start_node() {
    local name=$1 cpus=$2 resources=$3
    shift 3
    local ports pidfile="$DIR/$name.pid"
    read -r -a ports <<<"$(free_ports 6)"
    rm -f "$pidfile"
    # setsid + exec: the pid written is the session leader, which becomes `ray start`.
    setsid sh -c 'echo $$ > "$0"; exec "$@"' "$pidfile" \
        "$RAY" start --block --disable-usage-stats \
        --node-ip-address="$NODE_IP" \
        --num-cpus="$cpus" --resources="$resources" \
        --object-store-memory="$OBJECT_STORE" \
        --node-manager-port="${ports[0]}" --object-manager-port="${ports[1]}" \
        --dashboard-agent-listen-port="${ports[2]}" \
        --dashboard-agent-grpc-port="${ports[3]}" \
        --metrics-export-port="${ports[4]}" --runtime-env-agent-port="${ports[5]}" \
        --min-worker-port=0 --max-worker-port=0 \
        "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
    wait_for_pidfile "$name" "$pidfile"
}


cmd_start() {
    local n=${1:-}
    shift || true
    [[ "$n" =~ ^[0-9]+$ ]] || die "start: N (number of workers) must be an integer >= 0, got '${n}'"
    local dashboard=false keep=false mhz_list="" k
    while (($# > 0)); do
        case "$1" in
            --dashboard) dashboard=true ;;
            --keep-logs) keep=true ;;
            --mhz)
                [[ $# -ge 2 ]] || die "start: --mhz needs a comma-separated list of speeds"
                mhz_list=$2
                shift
                ;;
            --mhz=*) mhz_list=${1#--mhz=} ;;
            *) die "start: unknown option '$1'" ;;
        esac
        shift
    done
    local -a mhz=()
    if [[ -n "$mhz_list" ]]; then
        IFS=, read -r -a mhz <<<"$mhz_list"
        [[ ${#mhz[@]} -eq $((n + 1)) ]] ||
            die "start: --mhz needs $((n + 1)) speeds (head and $n workers), got ${#mhz[@]}"
        for k in "${!mhz[@]}"; do
            [[ "${mhz[$k]}" =~ ^[0-9]+$ && "${mhz[$k]}" -gt 0 ]] ||
                die "start: --mhz[$k]: '${mhz[$k]}' is not a whole number of MHz > 0"
        done
    else
        for ((k = 0; k <= n; k++)); do mhz+=($((600 - (k % 6) * 100))); done
    fi
    command -v "$RAY" >/dev/null || die "the ray CLI ('$RAY') is not installed"
    if load_state; then
        local pid
        for pid in $PIDS; do
            if is_leader "${pid##*:}"; then
                die "a cluster is already running at $ADDRESS (state $STATE); stop it first"
            fi
        done
        rm -f "$STATE"
    fi
    if [[ "$AUTH_MODE" == token ]]; then
        # Ray versions without token authentication have no get-auth-token: nothing to do.
        if "$RAY" get-auth-token --help >/dev/null 2>&1; then
            "$RAY" get-auth-token --generate >/dev/null ||
                die "cannot create a Ray authentication token (ray get-auth-token --generate)"
        fi
    fi
    mkdir -p "$DIR/logs"
    # Ray puts unix sockets under the temp dir; their paths must stay under 108 bytes.
    [[ ${#TEMP_DIR} -le 60 ]] || die "COALLOC_CLUSTER_DIR is too long for Ray's unix sockets" \
        "(${#TEMP_DIR} > 60 characters): $DIR"
    [[ "$keep" == true ]] || rm -rf "$TEMP_DIR"

    local head_pid gcs_port client_port dash_port dashboard_args=(--include-dashboard=false)
    read -r gcs_port client_port dash_port <<<"$(free_ports 3)"
    if [[ "$dashboard" == true ]]; then
        dashboard_args=(--include-dashboard=true --dashboard-host="$NODE_IP"
                        --dashboard-port="$dash_port")
    fi
    ADDRESS="$NODE_IP:$gcs_port"
    PIDS=""
    DASHBOARD=""
    if [[ "$dashboard" == true ]]; then DASHBOARD="http://$NODE_IP:$dash_port"; fi
    # Record the state before anything starts so that `stop` can always clean up.
    write_state
    trap 'echo "local-cluster: start failed; stopping what was started" >&2; cmd_stop >&2' ERR
    trap 'echo "local-cluster: interrupted; stopping what was started" >&2; cmd_stop >&2; exit 130' \
        INT TERM

    local res="{\"coalloc_head\": 1, \"coalloc_mhz\": ${mhz[0]}}"
    head_pid=$(start_node head 1 "$res" --head --port="$gcs_port" \
        --ray-client-server-port="$client_port" --temp-dir="$TEMP_DIR" "${dashboard_args[@]}")
    PIDS="$PIDS head:$head_pid"
    write_state
    echo "head      pid $head_pid  cpus 1  resources $res"
    wait_for_nodes "$ADDRESS" 1 >/dev/null

    local i pid
    for ((i = 1; i <= n; i++)); do
        res="{\"coalloc_node_$i\": 1, \"coalloc_mhz\": ${mhz[$i]}}"
        pid=$(start_node "worker$i" $((i + 1)) "$res" --address="$ADDRESS")
        PIDS="$PIDS worker$i:$pid"
        write_state
        echo "worker$i   pid $pid  cpus $((i + 1))  resources $res"
        # One at a time: raylets starting together in one session race for the same
        # socket file names (plasma_store.N) and one of them dies.
        wait_for_nodes "$ADDRESS" $((i + 1)) >/dev/null
    done
    echo "$((n + 1)) nodes alive"
    trap - ERR INT TERM
    echo "address   $ADDRESS"
    echo "auth      RAY_AUTH_MODE=$AUTH_MODE (clients: eval \"\$($0 env)\")"
    echo "state     $STATE"
}

cmd_stop() {
    if ! load_state; then
        echo "local-cluster: nothing to stop (no state file $STATE)"
        return 0
    fi
    local -a entries
    read -r -a entries <<<"$PIDS"
    # Workers first, the head last.
    stop_sessions "$PIDS"
    rm -f "$STATE" "$DIR"/*.pid
    echo "stopped ${#entries[@]} node(s) of $ADDRESS"
}

cmd_status() {
    if ! load_state; then
        echo "not running (no state file $STATE)"
        return 3
    fi
    local entry alive=0 total=0
    echo "address   $ADDRESS"
    echo "auth      RAY_AUTH_MODE=${AUTH_MODE}"
    if [[ -n "${DASHBOARD:-}" ]]; then echo "dashboard $DASHBOARD"; fi
    for entry in $PIDS; do
        total=$((total + 1))
        if is_leader "${entry##*:}"; then
            alive=$((alive + 1))
            echo "${entry%%:*}  pid ${entry##*:}  running"
        else
            echo "${entry%%:*}  pid ${entry##*:}  NOT running"
        fi
    done
    if ((alive == 0)); then return 3; fi
    RAY_AUTH_MODE=$AUTH_MODE "$RAY" status --address "$ADDRESS" || true
    ((alive == total)) || return 1
}

cmd_address() {
    load_state || die "not running (no state file $STATE)"
    echo "$ADDRESS"
}

cmd_env() {
    load_state || die "not running (no state file $STATE)"
    echo "export RAY_ADDRESS=$ADDRESS"
    echo "export RAY_AUTH_MODE=$AUTH_MODE"
}

case "${1:-}" in
    start) shift; cmd_start "$@" ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    address) cmd_address ;;
    env) cmd_env ;;
    *) usage ;;
esac

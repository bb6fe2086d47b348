#!/usr/bin/env bash
# A multi-HOST Ray cluster on ONE machine, out of Linux network namespaces (root only).
#
#   deploy/netns-cluster.sh up N [--mhz M1,...,MN] [--cpus C]   # N hosts and a head
#   deploy/netns-cluster.sh status
#   deploy/netns-cluster.sh address        # host:port of the head (GCS)
#   deploy/netns-cluster.sh env            # export lines for clients
#   deploy/netns-cluster.sh exec K CMD...  # run CMD on host K (in its namespace)
#   deploy/netns-cluster.sh rejoin K       # a new raylet on host K if its own has exited
#   deploy/netns-cluster.sh down
#
# Host K (1..N) is the namespace <prefix>K ("host1", "host2", ...) with one end of a veth
# pair as its eth0 (address SUBNET.K/24) and the other end on a bridge in the root
# namespace (address SUBNET.254), and its own raylet:
#   ip netns exec hostK ray start --address=SUBNET.254:PORT --node-ip-address=SUBNET.K
# with --num-cpus C (default 1) and resources {"coalloc_mhz": MK, "coalloc_label_<prefix>K": 1,
# "coalloc_label_nshost": 1} (labels a job file can ask for). The head (GCS, and a raylet
# with 1 CPU and "coalloc_label_head") runs in the root namespace and listens on the
# bridge address, so the global manager and the controller that `coalloc up` starts there
# are reached over each host's veth: cut a host's link and it is partitioned for real.
#
# Every raylet runs in its own session; `down` ends those sessions (SIGTERM, then SIGKILL
# after 20 s), kills whatever still runs in the namespaces, and deletes the namespaces,
# the veth pairs and the bridge. It never runs `ray stop`. `up` records what it builds
# before building it, and a failed or interrupted `up` runs `down` itself.
#
# Environment:
#   COALLOC_NETNS_DIR     state, logs, Ray temp dir     (default /tmp/coalloc-netns)
#   COALLOC_NETNS_PREFIX  namespace name prefix         (default host: host1, host2, ...)
#   COALLOC_NETNS_SUBNET  first three octets of the /24 (default 10.77.0)
#   COALLOC_NETNS_BRIDGE  the bridge's name             (default cabr0)
#   COALLOC_OBJECT_STORE  object store bytes per node   (default 80000000)
#   COALLOC_START_TIMEOUT seconds to wait for all nodes (default 180)
#   RAY, PYTHON           the ray CLI and a python with ray (defaults: ray, python3)
#   RAY_AUTH_MODE         token or disabled             (default token; a token is made
#                         if ~/.ray/auth_token is missing; every host reads that file)
set -Eeuo pipefail

DIR=${COALLOC_NETNS_DIR:-/tmp/coalloc-netns}
PREFIX=${COALLOC_NETNS_PREFIX:-host}
SUBNET=${COALLOC_NETNS_SUBNET:-10.77.0}
BRIDGE=${COALLOC_NETNS_BRIDGE:-cabr0}
OBJECT_STORE=${COALLOC_OBJECT_STORE:-80000000}
START_TIMEOUT=${COALLOC_START_TIMEOUT:-180}
RAY=${RAY:-ray}
PYTHON=${PYTHON:-python3}
STATE="$DIR/cluster.env"
HEAD_IP="$SUBNET.254"
unset RAY_ADDRESS
AUTH_MODE=${RAY_AUTH_MODE:-token}
export RAY_AUTH_MODE=$AUTH_MODE

die() { echo "netns-cluster: $*" >&2; exit 2; }
SCRIPT_NAME=netns-cluster
# shellcheck source=deploy/ray-nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/ray-nodes.sh"

usage() {
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

[[ "$AUTH_MODE" == token || "$AUTH_MODE" == disabled ]] ||
    die "RAY_AUTH_MODE must be token or disabled, got '$AUTH_MODE'"
[[ "$SUBNET" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] ||
    die "COALLOC_NETNS_SUBNET must be three octets such as 10.77.0, got '$SUBNET'"
[[ "$PREFIX" =~ ^[a-z][a-z0-9-]{0,8}$ ]] ||
    die "COALLOC_NETNS_PREFIX must be 1-9 of a-z, 0-9, - (a letter first), got '$PREFIX'"
[[ ${#BRIDGE} -le 15 ]] || die "COALLOC_NETNS_BRIDGE: at most 15 characters, got '$BRIDGE'"

# Exit 3 with one line saying why when this machine cannot build namespaces.
require_netns() {
    [[ "$(id -u)" == 0 ]] ||
        { echo "netns-cluster: needs root (network namespaces, veth pairs, a bridge);" \
               "run it as root or use deploy/local-cluster.sh" >&2; exit 3; }
    command -v ip >/dev/null ||
        { echo "netns-cluster: the ip command (iproute2) is missing:" \
               "apt-get install iproute2" >&2; exit 3; }
    local probe="cans-probe-$$" err
    if ! err=$(ip netns add "$probe" 2>&1); then
        echo "netns-cluster: network namespaces are not allowed here (ip netns add: ${err##*: });" \
             "a container needs CAP_SYS_ADMIN and CAP_NET_ADMIN (docker run --privileged)" >&2
        exit 3
    fi
    ip netns del "$probe" 2>/dev/null || true
}

ns_name() { echo "$PREFIX$1"; }
veth_name() { echo "v$PREFIX$1" | cut -c1-15; }

# Print COUNT distinct free TCP ports on HEAD_IP (held open until all are chosen).
free_ports() { free_ports_on "$1" "$HEAD_IP"; }

write_state() {
    {
        echo "ADDRESS=${ADDRESS:-}"
        echo "N=${N:-0}"
        echo "PREFIX=$PREFIX"
        echo "SUBNET=$SUBNET"
        echo "BRIDGE=$BRIDGE"
        echo "TEMP_DIR=$TEMP_DIR"
        echo "PIDS=\"${PIDS# }\""
        echo "CPUS=${CPUS:-1}"
        echo "AUTH_MODE=$AUTH_MODE"
    } >"$STATE"
}

load_state() {
    [[ -f "$STATE" ]] || return 1
    # shellcheck disable=SC1090
    source "$STATE"
    HEAD_IP="$SUBNET.254"
}

# Start a node in a new session (in namespace NS, or the root one if NS is "-"); print
# the session leader's pid. Args: name ns args-of-ray-start...
start_node() {
    local name=$1 ns=$2 pidfile="$DIR/$1.pid"
    shift 2
    local -a wrap=()
    [[ "$ns" == - ]] || wrap=(ip netns exec "$ns")
    rm -f "$pidfile"
    # setsid + exec: the pid written is the session leader, which becomes `ray start`.
    setsid "${wrap[@]}" sh -c 'echo $$ > "$0"; exec "$@"' "$pidfile" \
        "$RAY" start --block --disable-usage-stats \
        --object-store-memory="$OBJECT_STORE" "$@" \
        >"$DIR/logs/$name.log" 2>&1 </dev/null &
    wait_for_pidfile "$name" "$pidfile"
}

# Build host K's namespace and link (idempotent pieces are not assumed: `up` starts clean).
make_host() {
    local k=$1 ns veth
    ns=$(ns_name "$k")
    veth=$(veth_name "$k")
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BRIDGE"
    ip link set "$veth" up
    ip -n "$ns" addr add "$SUBNET.$k/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "$HEAD_IP"
}

cmd_up() {
    local n=${1:-}
    shift || true
    [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 200 ]] ||
        die "up: N (number of hosts) must be a whole number 1-200, got '${n}'"
    local mhz_list="" cpus=1 k
    while (($# > 0)); do
        case "$1" in
            --mhz) [[ $# -ge 2 ]] || die "up: --mhz needs a comma-separated list"; mhz_list=$2; shift ;;
            --mhz=*) mhz_list=${1#--mhz=} ;;
            --cpus) [[ $# -ge 2 ]] || die "up: --cpus needs a number"; cpus=$2; shift ;;
            --cpus=*) cpus=${1#--cpus=} ;;
            *) die "up: unknown option '$1'" ;;
        esac
        shift
    done
    [[ "$cpus" =~ ^[0-9]+$ && "$cpus" -ge 1 ]] || die "up: --cpus must be a whole number >= 1"
    CPUS=$cpus
    local -a mhz=()
    if [[ -n "$mhz_list" ]]; then
        IFS=, read -r -a mhz <<<"$mhz_list"
        [[ ${#mhz[@]} -eq "$n" ]] || die "up: --mhz needs $n speeds, got ${#mhz[@]}"
        for k in "${!mhz[@]}"; do
            [[ "${mhz[$k]}" =~ ^[0-9]+$ && "${mhz[$k]}" -gt 0 ]] ||
                die "up: --mhz[$k]: '${mhz[$k]}' is not a whole number of MHz > 0"
        done
    else
        for ((k = 0; k < n; k++)); do mhz+=(1000); done
    fi
    require_netns
    command -v "$RAY" >/dev/null || die "the ray CLI ('$RAY') is not installed"
    mkdir -p "$DIR/logs"
    TEMP_DIR="$DIR/ray"
    [[ ${#TEMP_DIR} -le 60 ]] || die "COALLOC_NETNS_DIR is too long for Ray's unix sockets: $DIR"
    if load_state; then
        die "a cluster is recorded in $STATE ($N hosts, head ${ADDRESS:-?}); run down first"
    fi
    for ((k = 1; k <= n; k++)); do
        ! ip netns list | grep -qw "$(ns_name "$k")" ||
            die "namespace $(ns_name "$k") exists already (another cluster?); choose" \
                "another COALLOC_NETNS_PREFIX or delete it"
    done
    ! ip link show "$BRIDGE" >/dev/null 2>&1 ||
        die "bridge $BRIDGE exists already; choose another COALLOC_NETNS_BRIDGE or delete it"
    if [[ "$AUTH_MODE" == token ]] && "$RAY" get-auth-token --help >/dev/null 2>&1; then
        "$RAY" get-auth-token --generate >/dev/null ||
            die "cannot create a Ray authentication token (ray get-auth-token --generate)"
    fi
    rm -rf "$TEMP_DIR"
    N=$n
    PIDS=""
    ADDRESS=""
    write_state  # before anything is built: `down` can always clean up
    trap 'echo "netns-cluster: up failed; removing what was built" >&2; cmd_down >&2' ERR
    trap 'echo "netns-cluster: interrupted; removing what was built" >&2; cmd_down >&2; exit 130' \
        INT TERM

    ip link add "$BRIDGE" type bridge
    ip addr add "$HEAD_IP/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for ((k = 1; k <= n; k++)); do make_host "$k"; done

    local gcs_port client_port pid
    read -r gcs_port client_port <<<"$(free_ports 2)"
    ADDRESS="$HEAD_IP:$gcs_port"
    write_state
    # The head in the root namespace: its own free ports (other Ray clusters may run here).
    local -a hp
    read -r -a hp <<<"$(free_ports 6)"
    pid=$(start_node head - --head --port="$gcs_port" --node-ip-address="$HEAD_IP" \
        --ray-client-server-port="$client_port" --temp-dir="$TEMP_DIR" \
        --include-dashboard=false --num-cpus=1 \
        --resources='{"coalloc_label_head": 1}' \
        --node-manager-port="${hp[0]}" --object-manager-port="${hp[1]}" \
        --dashboard-agent-listen-port="${hp[2]}" --dashboard-agent-grpc-port="${hp[3]}" \
        --metrics-export-port="${hp[4]}" --runtime-env-agent-port="${hp[5]}")
    PIDS="$PIDS head:$pid"
    write_state
    echo "head    pid $pid  $ADDRESS (root namespace, bridge $BRIDGE)"
    wait_for_nodes "$ADDRESS" 1

    # Hosts: each namespace has its own ports, so Ray's default ports (dashboard agent,
    # metrics export, runtime env agent, node and object manager) are free in each.
    local ns res
    for ((k = 1; k <= n; k++)); do
        ns=$(ns_name "$k")
        res="{\"coalloc_mhz\": ${mhz[$((k - 1))]}, \"coalloc_label_$ns\": 1, \"coalloc_label_nshost\": 1}"
        start_host "$k" "$res"
        # One at a time: raylets starting together race for socket file names.
        wait_for_nodes "$ADDRESS" $((k + 1))
    done
    trap - ERR INT TERM
    echo "$((n + 1)) nodes alive"
    echo "address $ADDRESS"
    echo "auth    RAY_AUTH_MODE=$AUTH_MODE (clients: eval \"\$($0 env)\")"
    echo "state   $STATE"
}

# Start host K's raylet with resources RES; record it (and them, for rejoin).
start_host() {
    local k=$1 res=$2 ns pid
    ns=$(ns_name "$k")
    pid=$(start_node "$ns" "$ns" --address="$ADDRESS" --node-ip-address="$SUBNET.$k" \
        --num-cpus="$CPUS" --resources="$res")
    PIDS="$(echo " $PIDS " | sed "s/ $ns:[0-9]* / /; s/^ *//; s/ *$//") $ns:$pid"
    echo "$res" >"$DIR/$ns.resources"
    write_state
    echo "$ns   pid $pid  $SUBNET.$k  cpus $CPUS  resources $res"
}

cmd_rejoin() {
    load_state || die "not running (no state file $STATE)"
    local k=${1:-} ns entry alive=0
    [[ "$k" =~ ^[0-9]+$ && "$k" -ge 1 && "$k" -le "$N" ]] || die "rejoin: K must be 1-$N, got '$k'"
    ns=$(ns_name "$k")
    for entry in $PIDS; do
        if [[ "${entry%%:*}" == "$ns" ]] && is_leader "${entry##*:}"; then
            echo "$ns: its raylet (pid ${entry##*:}) runs; nothing to do"
            return 0
        fi
    done
    for entry in $PIDS; do
        if is_leader "${entry##*:}"; then alive=$((alive + 1)); fi
    done
    start_host "$k" "$(cat "$DIR/$ns.resources")"
    wait_for_nodes "$ADDRESS" $((alive + 1))
}

cmd_down() {
    if ! load_state; then
        echo "netns-cluster: nothing to remove (no state file $STATE)"
        return 0
    fi
    local pid k ns
    stop_sessions "${PIDS:-}"
    for ((k = 1; k <= N; k++)); do
        ns=$(ns_name "$k")
        if ip netns list | grep -qw "$ns"; then
            # Anything still running in the host (a subtask a killed manager left): gone.
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns del "$ns" 2>/dev/null || true
        fi
        ip link del "$(veth_name "$k")" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    rm -f "$STATE" "$DIR"/*.pid "$DIR"/*.resources
    echo "removed $N host(s) and the head ${ADDRESS:-}"
}

cmd_status() {
    if ! load_state; then
        echo "not running (no state file $STATE)"
        return 3
    fi
    local entry alive=0 total=0
    echo "address $ADDRESS"
    echo "auth    RAY_AUTH_MODE=$AUTH_MODE"
    for entry in $PIDS; do
        total=$((total + 1))
        if is_leader "${entry##*:}"; then
            alive=$((alive + 1)); echo "${entry%%:*}  pid ${entry##*:}  running"
        else
            echo "${entry%%:*}  pid ${entry##*:}  NOT running"
        fi
    done
    ((alive == total && total > 0)) || return 1
}

cmd_env() {
    load_state || die "not running (no state file $STATE)"
    echo "export RAY_ADDRESS=$ADDRESS"
    echo "export RAY_AUTH_MODE=$AUTH_MODE"
}

cmd_exec() {
    load_state || die "not running (no state file $STATE)"
    local k=${1:-}
    shift || true
    [[ "$k" =~ ^[0-9]+$ && "$k" -ge 1 && "$k" -le "$N" ]] || die "exec: K must be 1-$N, got '$k'"
    [[ $# -gt 0 ]] || die "exec: no command"
    exec ip netns exec "$(ns_name "$k")" "$@"
}

case "${1:-}" in
    up) shift; cmd_up "$@" ;;
    down) cmd_down ;;
    status) cmd_status ;;
    address) load_state || die "not running (no state file $STATE)"; echo "$ADDRESS" ;;
    env) cmd_env ;;
    exec) shift; cmd_exec "$@" ;;
    rejoin) shift; cmd_rejoin "$@" ;;
    *) usage ;;
esac

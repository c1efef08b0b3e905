#!/usr/bin/env bash
# Local Kafka (single-node KRaft, jars from Maven Central) + Redis, no Docker needed.
#
#   scripts/cluster.sh install   fetch the Kafka classpath into the cache (skipped when cached)
#                                and apt-get install redis-server when it is missing
#   scripts/cluster.sh up        start both on 127.0.0.1, wait until ready, print the env lines
#   scripts/cluster.sh up-secure the same with Kafka SASL_SSL (SCRAM-SHA-512), ACLs per service user
#                                (infra/kafka_acls.py) and Redis TLS + ACL users;
#                                certificates, passwords and the planner token in $JOINLIB_SECURE_DIR
#                                (docs/security.md)
#   scripts/cluster.sh down      stop both (idempotent); the next `up` starts afresh
#   scripts/cluster.sh stop [kafka|redis]   stop both (or one), KEEPING the broker's data (KRaft log
#                                dirs, meta.properties with the cluster id) and the ports
#   scripts/cluster.sh start [kafka|redis]  start both (or one) again on the kept data and ports:
#                                topics, records and consumer-group offsets are still there
#   scripts/cluster.sh restart-kafka        stop then start the broker with its data (a drill's restart)
#   scripts/cluster.sh status    show what runs; exit 0 only if both are up
#   scripts/cluster.sh env       print KAFKA_BOOTSTRAP_SERVERS=... / REDIS_URL=... of the running cluster
#   scripts/cluster.sh env-mtls [USER]  up-secure: the same with Kafka over mutual TLS (USER's client
#                                certificate, default joinlib-cli) instead of SCRAM
#
# Environment (defaults):
#   JOINLIB_CACHE        ($HOME/.cache/joinlib)  jars in $JOINLIB_CACHE/kafka-lib
#   JOINLIB_RUN_DIR      ($JOINLIB_CACHE/run)    configs, data, logs, pidfiles
#   KAFKA_PORT           (19092)  broker listener
#   KAFKA_CONTROLLER_PORT(19093)  KRaft controller listener
#   KAFKA_SSL_PORT       (19094)  up-secure: the mutual-TLS listener (client certificates instead of SCRAM)
#   REDIS_PORT           (16379)
#   KAFKA_HEAP_OPTS      (-Xms256m -Xmx512m)
#   KAFKA_JVM_EXTRA_OPTS ()       appended to the JVM options
#   KAFKA_START_TIMEOUT  (90)  REDIS_START_TIMEOUT (15)   seconds
#   JOINLIB_SECURE_DIR   (<repo>/.secure, git-ignored)  up-secure: certificates and secrets (mode 600)
#
# `up` always starts the broker on a freshly formatted data dir (random cluster id): nothing survives a
# `down`/`up` cycle. `stop`/`start` (and `restart-kafka`) keep the broker's data dir, its cluster id and
# ports. Redis runs without persistence: its data does not survive any restart (use
# infra/redis/redis-durable.conf for that: docs/reliability.md).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${JOINLIB_CACHE:-$HOME/.cache/joinlib}"
RUN_DIR="${JOINLIB_RUN_DIR:-$CACHE/run}"
LIB_DIR="$CACHE/kafka-lib"
POM="$ROOT/infra/kafka/pom.xml"
LOG4J="$ROOT/infra/kafka/log4j.properties"
TEMPLATE="$ROOT/infra/kafka/server.properties.template"
REDIS_CONF="$ROOT/infra/redis/redis.conf"
SECURE_TEMPLATE="$ROOT/infra/kafka/server-secure.properties.template"
SECURE_DIR="${JOINLIB_SECURE_DIR:-$ROOT/.secure}"
SECURE=0

HOST=127.0.0.1
KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
KAFKA_SSL_PORT="${KAFKA_SSL_PORT:-19094}"
REDIS_PORT="${REDIS_PORT:-16379}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
REDIS_START_TIMEOUT="${REDIS_START_TIMEOUT:-15}"

KDIR="$RUN_DIR/kafka"
RDIR="$RUN_DIR/redis"
KAFKA_PIDFILE="$KDIR/kafka.pid"
KAFKA_LOG="$KDIR/kafka.log"
REDIS_PIDFILE="$RDIR/redis.pid"
REDIS_LOG="$RDIR/redis.log"
ENV_FILE="$RUN_DIR/cluster.env"
PORTS_FILE="$RUN_DIR/cluster.ports"
SECURE_MARK="$RUN_DIR/cluster.secure"

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- prerequisites
need_java() {
    command -v java >/dev/null 2>&1 ||
        die "java not found on PATH. Kafka needs a JRE >= 11 (17 recommended): apt-get install -y openjdk-17-jre-headless"
    local v
    v="$(java -version 2>&1 | sed -n 's/.*version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -n1)"
    if [[ -n "$v" && "$v" -lt 11 ]]; then
        die "java $v is too old for Kafka 3.9 (need >= 11, 17 recommended)"
    fi
}
need_mvn() {
    command -v mvn >/dev/null 2>&1 ||
        die "mvn not found on PATH; it is needed once to fetch the Kafka jars from Maven Central: apt-get install -y maven"
}
need_redis() {
    command -v redis-server >/dev/null 2>&1 ||
        die "redis-server not found on PATH. Run 'bash scripts/cluster.sh install' as root, or: apt-get install -y redis-server"
}

pom_hash() { sha256sum "$POM" | cut -c1-16; }

jars_cached() {
    [[ -f "$LIB_DIR/.pom-sha256" && "$(cat "$LIB_DIR/.pom-sha256")" == "$(pom_hash)" ]] &&
        compgen -G "$LIB_DIR/kafka_2.13-*.jar" >/dev/null
}

# ---------------------------------------------------------------- install
install_kafka() {
    if jars_cached; then
        log "Kafka jars cached in $LIB_DIR ($(find "$LIB_DIR" -maxdepth 1 -name "*.jar" | wc -l) jars)"
        return 0
    fi
    need_mvn
    mkdir -p "$CACHE"
    # one fetch at a time (shares the lock with infra/local_cluster.py); in a subshell so
    # the lock fd is not inherited by the broker started later
    (
        if command -v flock >/dev/null 2>&1; then flock 9; fi
        jars_cached && exit 0
        fetch_kafka_jars
    ) 9>"$CACHE/kafka-lib.lock"
}

fetch_kafka_jars() {
    local tmp="$CACHE/kafka-lib.tmp.$$" t0=$SECONDS
    rm -rf "$tmp"
    log "fetching the Kafka classpath from Maven Central into $LIB_DIR ..."
    if ! mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
            -DoutputDirectory="$tmp" -DincludeScope=runtime >"$CACHE/mvn-fetch.log" 2>&1; then
        tail -n 30 "$CACHE/mvn-fetch.log" >&2 || true
        rm -rf "$tmp"
        die "mvn dependency:copy-dependencies failed (full log: $CACHE/mvn-fetch.log)"
    fi
    compgen -G "$tmp/kafka_2.13-*.jar" >/dev/null || { rm -rf "$tmp"; die "mvn succeeded but no kafka_2.13 jar in $tmp"; }
    pom_hash >"$tmp/.pom-sha256"
    rm -rf "$LIB_DIR"
    mv "$tmp" "$LIB_DIR"
    log "fetched $(find "$LIB_DIR" -maxdepth 1 -name "*.jar" | wc -l) jars in $((SECONDS - t0)) s"
}

install_redis() {
    if command -v redis-server >/dev/null 2>&1; then
        log "redis-server present: $(redis-server --version | head -n1)"
        return 0
    fi
    local sudo=""
    if [[ "$(id -u)" -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo="sudo -n"
        else
            die "redis-server is missing and installing it needs root: run 'sudo apt-get install -y redis-server' (or this script as root)"
        fi
    fi
    command -v apt-get >/dev/null 2>&1 ||
        die "redis-server is missing and apt-get is not available; install redis-server (>= 6) with your package manager"
    log "installing redis-server with apt-get ..."
    $sudo apt-get update -qq || die "apt-get update failed (network or apt sources?)"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends redis-server ||
        die "apt-get install redis-server failed"
    # Debian's package starts a system redis on 6379 via systemd when systemd runs; ours uses its own port.
    command -v redis-server >/dev/null 2>&1 || die "redis-server still not on PATH after apt-get install"
    log "installed $(redis-server --version | head -n1)"
}

cmd_install() {
    need_java
    install_kafka
    install_redis
}

# ---------------------------------------------------------------- process helpers
pid_alive() { # pidfile expected-cmdline-substring
    local pidfile="$1" pat="$2" pid
    [[ -f "$pidfile" ]] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [[ -n "$pid" ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # guard against a recycled pid
    if [[ -r "/proc/$pid/cmdline" ]]; then
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$pat" || return 1
    fi
    echo "$pid"
}

port_in_use() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

stop_pid() { # name pidfile pattern
    local name="$1" pidfile="$2" pat="$3" pid i
    if ! pid="$(pid_alive "$pidfile" "$pat")"; then
        rm -f "$pidfile"
        log "$name not running"
        return 0
    fi
    log "stopping $name (pid $pid) ..."
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 120; i++)); do # up to 30 s for a controlled shutdown
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name did not stop after 30 s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$pidfile"
    log "$name stopped"
}

show_tail() { # file
    printf -- '----- last lines of %s -----\n' "$1" >&2
    tail -n 40 "$1" >&2 2>/dev/null || true
    printf -- '-----\n' >&2
}

write_env() {
    mkdir -p "$RUN_DIR"
    if [[ "$SECURE" == 1 ]]; then
        write_secure_env
        return
    fi
    {
        echo "KAFKA_BOOTSTRAP_SERVERS=$HOST:$KAFKA_PORT"
        echo "REDIS_URL=redis://$HOST:$REDIS_PORT/0"
    } >"$ENV_FILE"
}

# the client settings of docs/security.md; secrets only as *_FILE paths
write_secure_env() {
    {
        echo "KAFKA_BOOTSTRAP_SERVERS=$HOST:$KAFKA_PORT"
        echo "KAFKA_SECURITY_PROTOCOL=SASL_SSL"
        echo "KAFKA_SASL_MECHANISM=SCRAM-SHA-512"
        echo "KAFKA_SASL_USERNAME=joinlib-cli"
        echo "KAFKA_SASL_PASSWORD_FILE=$SECURE_DIR/kafka-joinlib-cli.password"
        echo "KAFKA_SSL_CA_FILE=$SECURE_DIR/ca.crt"
        echo "REDIS_URL=rediss://$HOST:$REDIS_PORT/0"
        echo "REDIS_USERNAME=joinlib-node"
        echo "REDIS_PASSWORD_FILE=$SECURE_DIR/redis-joinlib-node.password"
        echo "REDIS_SSL_CA_FILE=$SECURE_DIR/ca.crt"
        echo "JOINLIB_PLANNER_TOKEN_FILE=$SECURE_DIR/planner.token"
        echo "JOINLIB_PLAN_SIGNING_KEY_FILE=$SECURE_DIR/plan-signing.key"
        echo "JOINLIB_PLAN_VERIFY_KEY_FILE=$SECURE_DIR/plan-signing.pub"
    } >"$ENV_FILE"
}

# `kafka-storage format` arguments creating the SCRAM credential of every Kafka user
scram_args() {
    local f user
    for f in "$SECURE_DIR"/kafka-*.password; do
        user="$(basename "$f" .password)"
        user="${user#kafka-}"
        printf -- '--add-scram\nSCRAM-SHA-512=[name=%s,password=%s]\n' "$user" "$(cat "$f")"
    done
}

# ---------------------------------------------------------------- kafka
start_kafka() {
    local pid
    if pid="$(pid_alive "$KAFKA_PIDFILE" kafka.Kafka)"; then
        log "Kafka already running (pid $pid)"
        return 0
    fi
    need_java
    jars_cached || install_kafka # a user-level cache; no root needed
    local p
    local ports=("$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT")
    [[ "$SECURE" == 1 ]] && ports+=("$KAFKA_SSL_PORT")
    for p in "${ports[@]}"; do
        port_in_use "$p" && die "port $HOST:$p is already in use by another process; set KAFKA_PORT / KAFKA_CONTROLLER_PORT / KAFKA_SSL_PORT"
    done

    if [[ "${KEEP_DATA:-0}" == 1 ]]; then
        [[ -f "$KDIR/data/meta.properties" && -f "$KDIR/server.properties" ]] ||
            die "no broker data to start from in $KDIR (a 'stop' keeps it, 'down' and 'up' do not); run 'bash scripts/cluster.sh up'"
        launch_kafka "$(sed -n 's/^cluster.id=//p' "$KDIR/data/meta.properties")" "kept data"
        return
    fi
    rm -rf "$KDIR"
    mkdir -p "$KDIR/data"
    local template="$TEMPLATE" extra=()
    if [[ "$SECURE" == 1 ]]; then
        template="$SECURE_TEMPLATE"
        mapfile -t extra < <(scram_args)
    fi
    (umask 077 && sed -e "s|@HOST@|$HOST|g" -e "s|@KAFKA_PORT@|$KAFKA_PORT|g" \
        -e "s|@CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" -e "s|@SSL_PORT@|$KAFKA_SSL_PORT|g" -e "s|@DATA_DIR@|$KDIR/data|g" \
        -e "s|@CERT_DIR@|$SECURE_DIR|g" -e "s|@ADMIN_USER@|admin|g" \
        -e "s|@ADMIN_PASSWORD@|$(cat "$SECURE_DIR/kafka-admin.password" 2>/dev/null)|g" \
        "$template" >"$KDIR/server.properties")

    # shellcheck disable=SC2206
    local jopts=($KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
        "-Dlog4j.configuration=file:$LOG4J" ${KAFKA_JVM_EXTRA_OPTS:-})
    local cp="$LIB_DIR/*" cid t0
    t0=$(date +%s.%N)
    # what `kafka.tools.StorageTool random-uuid` prints (16 random bytes, base64url, unpadded,
    # not starting with '-'), without paying for a JVM start
    cid="-"
    while [[ "$cid" == -* ]]; do
        cid="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    done
    java "${jopts[@]}" -cp "$cp" kafka.tools.StorageTool format -t "$cid" -c "$KDIR/server.properties" \
        --ignore-formatted "${extra[@]}" >"$KDIR/format.log" 2>&1 ||
        { show_tail "$KDIR/format.log"; die "formatting the KRaft storage failed"; }
    launch_kafka "$cid" "incl. storage format" "$t0"
}

# start the broker on the formatted data dir $KDIR/data and wait until it is ready
launch_kafka() { # cluster-id what [t0]
    local cid="$1" what="$2" t0="${3:-$(date +%s.%N)}" pid
    # shellcheck disable=SC2206
    local jopts=($KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
        "-Dlog4j.configuration=file:$LOG4J" ${KAFKA_JVM_EXTRA_OPTS:-})
    local cp="$LIB_DIR/*"
    log "starting Kafka on $HOST:$KAFKA_PORT$([[ "$SECURE" == 1 ]] && echo " (SASL_SSL)") (controller $KAFKA_CONTROLLER_PORT, cluster id $cid) ..."
    # setsid: own session, so the broker outlives this shell / make and ignores the terminal's ^C
    setsid java "${jopts[@]}" -cp "$cp" kafka.Kafka "$KDIR/server.properties" \
        </dev/null >"$KAFKA_LOG" 2>&1 &
    pid=$!
    echo "$pid" >"$KAFKA_PIDFILE"

    local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
    while ! grep -q "Kafka Server started" "$KAFKA_LOG" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$KAFKA_PIDFILE"
            show_tail "$KAFKA_LOG"
            die "Kafka exited during startup (log: $KAFKA_LOG)"
        fi
        if ((SECONDS >= deadline)); then
            show_tail "$KAFKA_LOG"
            kill -TERM "$pid" 2>/dev/null || true
            rm -f "$KAFKA_PIDFILE"
            die "Kafka not ready after ${KAFKA_START_TIMEOUT}s (log: $KAFKA_LOG)"
        fi
        sleep 0.2
    done
    log "Kafka ready (pid $pid) in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s ($what)"
}

# ---------------------------------------------------------------- redis
redis_ping() { # port
    if [[ "$SECURE" == 1 ]]; then
        REDISCLI_AUTH="$(cat "$SECURE_DIR/redis-joinlib-admin.password")" redis-cli --tls --cacert "$SECURE_DIR/ca.crt" \
            --user joinlib-admin -h "$HOST" -p "$1" ping 2>/dev/null | grep -q PONG
        return
    fi
    if command -v redis-cli >/dev/null 2>&1; then
        [[ "$(redis-cli -h "$HOST" -p "$1" ping 2>/dev/null)" == "PONG" ]]
    else
        python3 -c "import redis,sys; sys.exit(0 if redis.Redis(host='$HOST', port=$1, socket_timeout=1).ping() else 1)" 2>/dev/null
    fi
}

start_redis() {
    local pid
    if pid="$(pid_alive "$REDIS_PIDFILE" redis-server)"; then
        log "Redis already running (pid $pid)"
        return 0
    fi
    need_redis
    port_in_use "$REDIS_PORT" && die "port $HOST:$REDIS_PORT is already in use by another process; set REDIS_PORT"
    [[ "${KEEP_DATA:-0}" == 1 ]] || rm -rf "$RDIR"
    mkdir -p "$RDIR"
    local port_args=(--port "$REDIS_PORT")
    if [[ "$SECURE" == 1 ]]; then
        port_args=(--port 0 --tls-port "$REDIS_PORT" --tls-cert-file "$SECURE_DIR/server.crt"
            --tls-key-file "$SECURE_DIR/server.key" --tls-ca-cert-file "$SECURE_DIR/ca.crt"
            --tls-auth-clients no --aclfile "$SECURE_DIR/users.acl")
    fi
    log "starting Redis on $HOST:$REDIS_PORT$([[ "$SECURE" == 1 ]] && echo " (TLS, ACL users)") ..."
    redis-server "$REDIS_CONF" "${port_args[@]}" --bind "$HOST" --dir "$RDIR" \
        --daemonize yes --pidfile "$REDIS_PIDFILE" --logfile "$REDIS_LOG" ||
        { show_tail "$REDIS_LOG"; die "redis-server failed to start (log: $REDIS_LOG)"; }
    local deadline=$((SECONDS + REDIS_START_TIMEOUT))
    until redis_ping "$REDIS_PORT"; do
        if ((SECONDS >= deadline)); then
            show_tail "$REDIS_LOG"
            die "Redis not answering PING after ${REDIS_START_TIMEOUT}s (log: $REDIS_LOG)"
        fi
        sleep 0.1
    done
    log "Redis ready (pid $(cat "$REDIS_PIDFILE" 2>/dev/null))"
}

# ---------------------------------------------------------------- commands
cmd_up() {
    if [[ "$SECURE" != 1 && -f "$SECURE_MARK" ]] && { pid_alive "$KAFKA_PIDFILE" kafka.Kafka || pid_alive "$REDIS_PIDFILE" redis-server; } >/dev/null; then
        die "the secure cluster (up-secure) is running; 'make down' first"
    fi
    # fail early, before starting anything, when a tool is missing
    need_java
    if ! pid_alive "$REDIS_PIDFILE" redis-server >/dev/null; then need_redis; fi
    if [[ -f "$PORTS_FILE" ]] && { pid_alive "$KAFKA_PIDFILE" kafka.Kafka || pid_alive "$REDIS_PIDFILE" redis-server; } >/dev/null; then
        # something already runs: keep the ports it was started with
        local want="$KAFKA_PORT/$KAFKA_CONTROLLER_PORT/$REDIS_PORT"
        # shellcheck disable=SC1090
        source "$PORTS_FILE"
        [[ "$want" == "$KAFKA_PORT/$KAFKA_CONTROLLER_PORT/$REDIS_PORT" ]] ||
            log "cluster already running on other ports (kafka $KAFKA_PORT, redis $REDIS_PORT); 'down' first to change them"
    fi
    mkdir -p "$RUN_DIR"
    printf 'KAFKA_PORT=%s\nKAFKA_CONTROLLER_PORT=%s\nKAFKA_SSL_PORT=%s\nREDIS_PORT=%s\n' \
        "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_SSL_PORT" "$REDIS_PORT" >"$PORTS_FILE"
    start_kafka
    start_redis
    write_env
    cat "$ENV_FILE"
}

cmd_up_secure() {
    if [[ ! -f "$SECURE_MARK" ]] && { pid_alive "$KAFKA_PIDFILE" kafka.Kafka || pid_alive "$REDIS_PIDFILE" redis-server; } >/dev/null; then
        die "a cluster without security is running; 'make down' first"
    fi
    SECURE=1
    mkdir -p "$RUN_DIR"
    touch "$SECURE_MARK"
    (cd "$ROOT" && python3 -m infra.secure_cluster prepare "$SECURE_DIR" >/dev/null) ||
        die "could not write the certificates and secrets into $SECURE_DIR"
    log "certificates, passwords and the planner token in $SECURE_DIR (mode 600; docs/security.md)"
    cmd_up
    # the ACLs per service principal (kept in the broker's metadata across stop/start)
    (cd "$ROOT" && python3 -m infra.kafka_acls apply "$HOST:$KAFKA_PORT" "$SECURE_DIR") ||
        die "could not create the Kafka ACLs (infra/kafka_acls.py)"
}

cmd_down() {
    stop_pid Kafka "$KAFKA_PIDFILE" kafka.Kafka
    stop_pid Redis "$REDIS_PIDFILE" redis-server
    rm -f "$ENV_FILE" "$PORTS_FILE" "$SECURE_MARK"
}

# which of kafka / redis a stop or start names (both when none); called as `pick X` before `$(pick X)`,
# so that a wrong name stops the script (a die inside $(...) would only end the subshell)
pick() { # what -> "kafka redis" | "kafka" | "redis"
    case "${1:-}" in
        "") echo "kafka redis" ;;
        kafka | redis) echo "$1" ;;
        *) die "unknown service '$1': expected kafka or redis (or nothing for both)" ;;
    esac
}

cmd_stop() { # [kafka|redis]: stop, keeping the broker's data, the ports and the env file
    local s
    pick "${1:-}" >/dev/null
    for s in $(pick "${1:-}"); do
        if [[ "$s" == kafka ]]; then stop_pid Kafka "$KAFKA_PIDFILE" kafka.Kafka; else stop_pid Redis "$REDIS_PIDFILE" redis-server; fi
    done
}

cmd_start() { # [kafka|redis]: start on the kept data and ports (after a stop)
    pick "${1:-}" >/dev/null
    [[ -f "$PORTS_FILE" ]] || die "nothing to start: no cluster was set up in $RUN_DIR (run 'bash scripts/cluster.sh up')"
    # shellcheck disable=SC1090
    source "$PORTS_FILE"
    [[ -f "$SECURE_MARK" ]] && SECURE=1
    local s
    for s in $(pick "${1:-}"); do
        if [[ "$s" == kafka ]]; then KEEP_DATA=1 start_kafka; else KEEP_DATA=1 start_redis; fi
    done
    write_env
    cat "$ENV_FILE"
}

cmd_status() {
    local rc=0 pid
    [[ -f "$SECURE_MARK" ]] && SECURE=1
    if pid="$(pid_alive "$KAFKA_PIDFILE" kafka.Kafka)"; then
        local port
        port="$(sed -n "s|^listeners=[A-Z_]*://[^:]*:\([0-9]*\),.*|\1|p" "$KDIR/server.properties" 2>/dev/null)"
        if [[ -n "$port" ]] && port_in_use "$port"; then
            echo "kafka: running  pid=$pid  bootstrap=$HOST:$port  log=$KAFKA_LOG"
        else
            echo "kafka: starting or unhealthy  pid=$pid  (listener $HOST:${port:-?} not accepting)  log=$KAFKA_LOG"
            rc=1
        fi
    elif [[ -f "$KDIR/data/meta.properties" ]]; then
        echo "kafka: stopped, data kept in $KDIR/data ('start' resumes it, 'up' starts afresh)"
        rc=1
    else
        echo "kafka: stopped"
        rc=1
    fi
    if pid="$(pid_alive "$REDIS_PIDFILE" redis-server)"; then
        local rport
        rport="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | sed -n 's/.*:\([0-9][0-9]*\).*/\1/p')"
        rport="${rport:-$REDIS_PORT}"
        if redis_ping "$rport"; then
            echo "redis: running  pid=$pid  url=redis$([[ "$SECURE" == 1 ]] && echo s)://$HOST:$rport/0  log=$REDIS_LOG"
        else
            echo "redis: not answering PING  pid=$pid  port=$rport"
            rc=1
        fi
    else
        echo "redis: stopped"
        rc=1
    fi
    if [[ $rc -eq 0 && -f "$ENV_FILE" ]]; then cat "$ENV_FILE"; fi
    if jars_cached; then echo "kafka jars: $LIB_DIR"; else echo "kafka jars: not installed (run: bash scripts/cluster.sh install)"; fi
    return $rc
}

# the secure cluster's env with mutual TLS (a client certificate) instead of SCRAM for Kafka
cmd_env_mtls() { # [user]
    local user="${1:-joinlib-cli}"
    [[ -f "$ENV_FILE" && -f "$SECURE_MARK" ]] || die "no secure cluster running (run 'bash scripts/cluster.sh up-secure')"
    [[ -f "$SECURE_DIR/client-$user.crt" ]] || die "no client certificate for '$user' in $SECURE_DIR"
    # shellcheck disable=SC1090
    source "$PORTS_FILE"
    grep -v '^KAFKA_' "$ENV_FILE"
    echo "KAFKA_BOOTSTRAP_SERVERS=$HOST:$KAFKA_SSL_PORT"
    echo "KAFKA_SECURITY_PROTOCOL=SSL"
    echo "KAFKA_SSL_CA_FILE=$SECURE_DIR/ca.crt"
    echo "KAFKA_SSL_CERT_FILE=$SECURE_DIR/client-$user.crt"
    echo "KAFKA_SSL_KEY_FILE=$SECURE_DIR/client-$user.key"
}

cmd_env() {
    [[ -f "$ENV_FILE" ]] || die "no running cluster (no $ENV_FILE); run 'bash scripts/cluster.sh up'"
    cat "$ENV_FILE"
}

case "${1:-}" in
    install) cmd_install ;;
    up) cmd_up ;;
    up-secure) cmd_up_secure ;;
    down) cmd_down ;;
    stop) cmd_stop "${2:-}" ;;
    start) cmd_start "${2:-}" ;;
    restart-kafka) cmd_stop kafka && cmd_start kafka ;;
    status) cmd_status ;;
    env) cmd_env ;;
    env-mtls) cmd_env_mtls "${2:-}" ;;
    -h | --help | help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
    *)
        echo "usage: $0 {install|up|up-secure|down|stop [kafka|redis]|start [kafka|redis]|restart-kafka|status|env|env-mtls [user]}" >&2
        exit 2
        ;;
esac

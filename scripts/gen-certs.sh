#!/usr/bin/env bash
# Generate a throw-away CA and a server certificate for the local secure cluster (make up-secure,
# tests/integration/test_security.py). Everything is local and self-signed: never use these in
# production (docs/security.md).
#
#   scripts/gen-certs.sh DIR [HOST ...]
#   CLIENTS="joinlib-node joinlib-cli" scripts/gen-certs.sh DIR [HOST ...]   also client certificates
#
# Writes into DIR (created, mode 700; files mode 600):
#   ca.crt              the CA certificate (clients trust it: KAFKA_SSL_CA_FILE, REDIS_SSL_CA_FILE)
#   ca.key              the CA key
#   server.crt/.key     server certificate (SAN: 127.0.0.1, localhost and any HOST given), PKCS#8 key
#   server-bundle.pem   key + certificate + CA in one file (Kafka's PEM keystore)
#   client-NAME.crt/.key  for each NAME of $CLIENTS: a client certificate with CN=NAME (mutual TLS: the
#                         broker maps the CN to the Kafka user NAME, docs/security.md), PKCS#8 key
# Existing files are kept when ca.crt, server.crt and server-bundle.pem are all there (and per client).
set -euo pipefail

DIR="${1:?usage: $0 DIR [HOST ...]}"
shift
DAYS="${CERT_DAYS:-30}"
command -v openssl >/dev/null 2>&1 || { echo "[certs] ERROR: openssl not found (apt-get install -y openssl)" >&2; exit 1; }

# client certificates signed by the CA of DIR: CN=NAME, for TLS client authentication only
gen_clients() {
    local name
    for name in ${CLIENTS:-}; do
        [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "[certs] ERROR: bad client name '$name'" >&2; exit 1; }
        [[ -f "$DIR/client-$name.crt" && -f "$DIR/client-$name.key" ]] && continue
        openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=$name" \
            -keyout "$DIR/client-$name.key.tmp" -out "$DIR/client-$name.csr" 2>/dev/null
        printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' >"$DIR/client-$name.ext"
        openssl x509 -req -in "$DIR/client-$name.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" -CAcreateserial \
            -days "$DAYS" -sha256 -extfile "$DIR/client-$name.ext" -out "$DIR/client-$name.crt" 2>/dev/null
        openssl pkcs8 -topk8 -nocrypt -in "$DIR/client-$name.key.tmp" -out "$DIR/client-$name.key"
        rm -f "$DIR/client-$name.key.tmp" "$DIR/client-$name.csr" "$DIR/client-$name.ext" "$DIR/ca.srl"
        chmod 600 "$DIR/client-$name.crt" "$DIR/client-$name.key"
    done
}

umask 077
if [[ -f "$DIR/ca.crt" && -f "$DIR/server.crt" && -f "$DIR/server-bundle.pem" ]]; then
    gen_clients
    exit 0
fi
mkdir -p "$DIR"
chmod 700 "$DIR"

san="IP:127.0.0.1,DNS:localhost"
for h in "$@"; do
    if [[ "$h" =~ ^[0-9.]+$ ]]; then san="$san,IP:$h"; else san="$san,DNS:$h"; fi
done

openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$DAYS" -subj "/CN=joinlib local CA" \
    -keyout "$DIR/ca.key" -out "$DIR/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=localhost" \
    -keyout "$DIR/server.key.tmp" -out "$DIR/server.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' \
    "$san" >"$DIR/server.ext"
openssl x509 -req -in "$DIR/server.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" -CAcreateserial \
    -days "$DAYS" -sha256 -extfile "$DIR/server.ext" -out "$DIR/server.crt" 2>/dev/null
openssl pkcs8 -topk8 -nocrypt -in "$DIR/server.key.tmp" -out "$DIR/server.key"
rm -f "$DIR/server.key.tmp" "$DIR/server.csr" "$DIR/server.ext" "$DIR/ca.srl"
cat "$DIR/server.key" "$DIR/server.crt" "$DIR/ca.crt" >"$DIR/server-bundle.pem"
chmod 600 "$DIR"/*
gen_clients
echo "[certs] CA and server certificate (SAN $san)${CLIENTS:+, client certificates for $CLIENTS} in $DIR" >&2

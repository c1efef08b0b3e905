"""joinlib.settings: client security settings from the environment and files, secrets masked
(docs/security.md); the planner's token check; the Spark Kafka options."""
from __future__ import annotations

import pytest

from joinlib.settings import (
    KafkaSecurity,
    RedisSecurity,
    SettingsError,
    mask,
    planner_token,
    redact_url,
    secret,
)

PW = "s3cr\"et\\pw"


def test_plaintext_by_default_adds_nothing():
    sec = KafkaSecurity.from_env({})
    assert sec.protocol == "PLAINTEXT" and sec.librdkafka() == {} and sec.spark_options() == {}
    assert RedisSecurity.from_env({}).client_kwargs("redis://h:6379/0") == {}
    assert planner_token({}) is None


def test_sasl_ssl_from_env_and_password_file(tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    pw = tmp_path / "pw"
    pw.write_text(PW + "\n")
    env = {"KAFKA_SASL_USERNAME": "joinlib-node", "KAFKA_SASL_PASSWORD_FILE": str(pw), "KAFKA_SSL_CA_FILE": str(ca)}
    sec = KafkaSecurity.from_env(env)
    assert sec.protocol == "SASL_SSL"  # implied by the user name
    assert sec.librdkafka() == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                "sasl.username": "joinlib-node", "sasl.password": PW, "ssl.ca.location": str(ca),
                                "ssl.endpoint.identification.algorithm": "https"}
    spark = sec.spark_options()
    assert spark["kafka.security.protocol"] == "SASL_SSL" and spark["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert spark["kafka.sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                               'username="joinlib-node" password="s3cr\\"et\\\\pw";')
    assert spark["kafka.ssl.truststore.type"] == "PEM" and spark["kafka.ssl.truststore.location"] == str(ca)
    # never printed
    assert PW not in repr(sec) and PW not in sec.describe() and "joinlib-node" in sec.describe()
    assert PW not in str(mask(sec.librdkafka())) and PW not in str(mask(spark))


def test_mutual_tls_client_certificate(tmp_path):
    crt, key = tmp_path / "c.crt", tmp_path / "c.key"
    crt.write_text("-----BEGIN CERTIFICATE-----\nC\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nK\n")
    env = {"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CERT_FILE": str(crt), "KAFKA_SSL_KEY_FILE": str(key)}
    sec = KafkaSecurity.from_env(env)
    conf = sec.librdkafka()
    assert conf["security.protocol"] == "SSL" and "sasl.username" not in conf
    assert conf["ssl.certificate.location"] == str(crt) and conf["ssl.key.location"] == str(key)
    spark = sec.spark_options()
    assert spark["kafka.ssl.keystore.type"] == "PEM" and spark["kafka.ssl.keystore.key"].endswith("K\n")
    assert "K\n" not in str(mask(spark))   # the key is a secret in dumps
    assert f"client certificate {crt}" in sec.describe()
    with pytest.raises(SettingsError, match="needs both KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE"):
        KafkaSecurity.from_env({**env, "KAFKA_SSL_KEY_FILE": ""})
    with pytest.raises(SettingsError, match="KAFKA_SSL_CERT_FILE needs KAFKA_SECURITY_PROTOCOL=SSL"):
        KafkaSecurity.from_env({**env, "KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"})
    with pytest.raises(SettingsError, match="KAFKA_SSL_KEY_FILE=/nope: no such file"):
        KafkaSecurity.from_env({**env, "KAFKA_SSL_KEY_FILE": "/nope"})


def test_https_and_metrics_token_settings(tmp_path):
    from joinlib.settings import HttpSecurity
    assert HttpSecurity.from_env({}) == HttpSecurity() and HttpSecurity().server_context() is None
    assert HttpSecurity().scheme == "http"
    tok = tmp_path / "tok"
    tok.write_text("mtok\n")
    crt, key = tmp_path / "c.crt", tmp_path / "c.key"
    crt.write_text("not a certificate")
    key.write_text("not a key")
    sec = HttpSecurity.from_env({"JOINLIB_TLS_CERT_FILE": str(crt), "JOINLIB_TLS_KEY_FILE": str(key),
                                 "JOINLIB_METRICS_TOKEN_FILE": str(tok)})
    assert sec.scheme == "https" and sec.metrics_token == "mtok" and "mtok" not in repr(sec)
    with pytest.raises(SettingsError, match="cannot load the certificate and key"):
        sec.server_context()
    with pytest.raises(SettingsError, match="needs both JOINLIB_TLS_CERT_FILE and JOINLIB_TLS_KEY_FILE"):
        HttpSecurity.from_env({"JOINLIB_TLS_CERT_FILE": str(crt)})
    with pytest.raises(SettingsError, match="JOINLIB_PLANNER_CA_FILE=/nope: no such file"):
        from joinlib.settings import planner_client_context
        planner_client_context({"JOINLIB_PLANNER_CA_FILE": "/nope"})


def test_variable_wins_over_file_and_errors_name_the_variable_not_the_value(tmp_path):
    assert secret("X", {"X": "a", "X_FILE": "/nonexistent"}) == "a"
    with pytest.raises(SettingsError, match="X_FILE=/nonexistent: cannot read it"):
        secret("X", {"X_FILE": "/nonexistent"})
    empty = tmp_path / "e"
    empty.write_text("\n")
    with pytest.raises(SettingsError, match="is empty"):
        secret("X", {"X_FILE": str(empty)})
    with pytest.raises(SettingsError, match="needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD"):
        KafkaSecurity.from_env({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u"})
    with pytest.raises(SettingsError, match="expected one of PLAINTEXT, SSL"):
        KafkaSecurity.from_env({"KAFKA_SECURITY_PROTOCOL": "TLS"})
    with pytest.raises(SettingsError, match="KAFKA_SSL_CA_FILE=/nope: no such file"):
        KafkaSecurity.from_env({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CA_FILE": "/nope"})
    with pytest.raises(SettingsError, match="KAFKA_SASL_PASSWORD") as e:
        KafkaSecurity(protocol="SASL_SSL", username="u", password="")
    assert PW not in str(e.value)


def test_redis_settings_and_url_redaction(tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    sec = RedisSecurity.from_env({"REDIS_USERNAME": "joinlib-node", "REDIS_PASSWORD": PW, "REDIS_SSL_CA_FILE": str(ca)})
    assert sec.client_kwargs("rediss://h:6380/0") == {"username": "joinlib-node", "password": PW,
                                                      "ssl_ca_certs": str(ca)}
    assert "ssl_ca_certs" not in sec.client_kwargs("redis://h:6379/0")
    assert PW not in repr(sec)
    assert redact_url("rediss://joinlib-node:pw@h:6380/0") == "rediss://joinlib-node:***@h:6380/0"
    assert redact_url("redis://:pw@h/0") == "redis://:***@h/0"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    assert mask({"url": "redis://u:pw@h:1/0", "sasl.password": "x", "linger.ms": 5}) == {
        "url": "redis://u:***@h:1/0", "sasl.password": "***", "linger.ms": 5}


def test_planner_token_from_env_or_file(tmp_path):
    f = tmp_path / "token"
    f.write_text("tok-123\n")
    assert planner_token({"JOINLIB_PLANNER_TOKEN": "abc"}) == "abc"
    assert planner_token({"JOINLIB_PLANNER_TOKEN_FILE": str(f)}) == "tok-123"


def test_authorization_header_check():
    from services.planner.service import authorized
    assert authorized(None, None) and authorized("anything", None)  # no token: open
    assert authorized("Bearer tok", "tok") and authorized("bearer  tok ", "tok")
    for header in (None, "", "tok", "Bearer", "Bearer tok2", "Bearer to", "Basic tok", "Bearer ток"):
        assert not authorized(header, "tok"), header


def test_kafka_clients_and_spark_get_the_security_settings(monkeypatch, tmp_path):
    from joinlib.adapters.kafka import _base
    from services.spark.common import kafka_security_options
    for k in ("KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD", "KAFKA_SASL_PASSWORD_FILE",
              "KAFKA_SSL_CA_FILE"):
        monkeypatch.delenv(k, raising=False)
    assert "security.protocol" not in _base("h:1") and kafka_security_options() == {}
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "u")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "p")
    conf = _base("h:1")
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.username"] == "u" and conf["sasl.password"] == "p"
    assert kafka_security_options()["kafka.security.protocol"] == "SASL_SSL"

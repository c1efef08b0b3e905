"""joinlib.adapters.plan_signing: the planner's Ed25519 signatures of plan and stop messages (docs/security.md
"Signed plans"); the end-to-end check on the real broker is in tests/integration/test_security.py."""
from __future__ import annotations

import pytest

from joinlib.adapters.plan_signing import generate, sign_headers, verify
from joinlib.settings import SettingsError


def test_signed_kinds_verify_and_forgeries_do_not(tmp_path, monkeypatch):
    key, pub = tmp_path / "k.pem", tmp_path / "k.pub"
    generate(key, pub)
    assert key.stat().st_mode & 0o777 == 0o600
    monkeypatch.delenv("JOINLIB_PLAN_SIGNING_KEY_FILE", raising=False)
    monkeypatch.delenv("JOINLIB_PLAN_VERIFY_KEY_FILE", raising=False)
    assert sign_headers("plan", b"v") == [] and verify("plan", b"v", None) is None   # off: nothing changes
    monkeypatch.setenv("JOINLIB_PLAN_SIGNING_KEY_FILE", str(key))
    monkeypatch.setenv("JOINLIB_PLAN_VERIFY_KEY_FILE", str(pub))
    headers = sign_headers("plan", b"value")
    assert [k for k, _ in headers] == ["sig"] and sign_headers("status", b"value") == []
    assert verify("plan", b"value", headers) is None
    assert verify("status", b"anything", None) is None   # only plan and stop are signed
    assert "unsigned plan message" in (verify("plan", b"value", None) or "")
    assert "does not verify" in (verify("plan", b"other value", headers) or "")
    assert "does not verify" in (verify("stop", b"value", [("sig", b"\0" * 64)]) or "")
    other_key, other_pub = tmp_path / "o.pem", tmp_path / "o.pub"
    generate(other_key, other_pub)
    monkeypatch.setenv("JOINLIB_PLAN_SIGNING_KEY_FILE", str(other_key))
    assert "does not verify" in (verify("plan", b"value", sign_headers("plan", b"value")) or "")


def test_a_bad_key_file_is_named(tmp_path, monkeypatch):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    monkeypatch.setenv("JOINLIB_PLAN_SIGNING_KEY_FILE", str(bad))
    with pytest.raises(SettingsError, match="JOINLIB_PLAN_SIGNING_KEY_FILE=.*bad.pem: not an unencrypted Ed25519"):
        sign_headers("plan", b"v")
    monkeypatch.setenv("JOINLIB_PLAN_VERIFY_KEY_FILE", str(bad))
    with pytest.raises(SettingsError, match="JOINLIB_PLAN_VERIFY_KEY_FILE=.*bad.pem: not an Ed25519 public key"):
        verify("plan", b"v", [("sig", b"x")])

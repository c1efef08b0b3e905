"""Signed plans: the planner signs its ``plan`` and ``stop`` control messages (Ed25519), node services
verify them (docs/security.md "Signed plans").

The broker cannot keep nodes off ``control`` -- their ``status``/``done`` and the sources' ``end`` messages
travel there too -- so a node's Kafka credentials could publish a forged plan.  A signature only the
planner's key makes closes that: with ``JOINLIB_PLAN_VERIFY_KEY_FILE`` (the public key, PEM) set, a
``plan`` or ``stop`` message whose ``sig`` header is missing or does not verify is rejected like any
invalid control message (a dead letter, logged, ignored).  ``JOINLIB_PLAN_SIGNING_KEY_FILE`` (the private
key, PEM) makes every publisher of those kinds -- the planner, ``joinlib run --cluster`` -- sign them.
Without either variable nothing changes.

The signature covers the message's value (query, kind, payload with its run id): it cannot be moved to
another query or run, but a recorded genuine message can be published again (replay).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Union

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from joinlib.settings import SettingsError, plan_key_files

SIGNED_KINDS = frozenset({"plan", "stop"})
HEADER = "sig"


@lru_cache(maxsize=4)
def _signing_key(path: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        raise SettingsError(f"JOINLIB_PLAN_SIGNING_KEY_FILE={path}: not an unencrypted Ed25519 private key "
                            f"in PEM ({e})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SettingsError(f"JOINLIB_PLAN_SIGNING_KEY_FILE={path}: not an Ed25519 key")
    return key


@lru_cache(maxsize=4)
def _verify_key(path: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError, TypeError) as e:
        raise SettingsError(f"JOINLIB_PLAN_VERIFY_KEY_FILE={path}: not an Ed25519 public key in PEM ({e})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SettingsError(f"JOINLIB_PLAN_VERIFY_KEY_FILE={path}: not an Ed25519 key")
    return key


def sign_headers(kind: str, value: bytes) -> list[tuple[str, Union[str, bytes, None]]]:
    """The ``sig`` header of a control message of ``kind`` (none unless it is a signed kind and
    ``JOINLIB_PLAN_SIGNING_KEY_FILE`` is set)."""
    path = plan_key_files()[0]
    if kind not in SIGNED_KINDS or path is None:
        return []
    return [(HEADER, _signing_key(path).sign(value))]


def verify(kind: str, value: bytes, headers: Any) -> Optional[str]:
    """None if a control message of ``kind`` may be acted on, else why not: with
    ``JOINLIB_PLAN_VERIFY_KEY_FILE`` set, a signed kind needs a ``sig`` header that verifies."""
    path = plan_key_files()[1]
    if kind not in SIGNED_KINDS or path is None:
        return None
    sigs = [v for k, v in (headers or []) if k == HEADER and isinstance(v, bytes)]
    if not sigs:
        return f"unsigned {kind} message (JOINLIB_PLAN_VERIFY_KEY_FILE is set: only the planner's signed ones count)"
    try:
        _verify_key(path).verify(sigs[-1], value)
    except InvalidSignature:
        return f"{kind} message with a signature that does not verify (not the planner's key)"
    return None


def generate(private: Path, public: Path) -> None:
    """Write a new key pair (PEM; the private key mode 600) unless ``private`` exists."""
    if private.exists():
        return
    key = Ed25519PrivateKey.generate()
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))

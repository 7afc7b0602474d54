"""Secrets: password hashing (Argon2id), API tokens (random, stored as SHA-256) and CSRF tokens."""

import hashlib
import hmac
import secrets
from functools import cache

from argon2 import PasswordHasher, profiles
from argon2.exceptions import InvalidHashError, VerificationError

PASSWORD_PARAMETERS = profiles.RFC_9106_LOW_MEMORY
"""Argon2id at RFC 9106's second recommended setting (t = 3, 64 MiB, 4 lanes; argon2-cffi's default)."""

_password_hasher = PasswordHasher.from_parameters(PASSWORD_PARAMETERS)

API_TOKEN_PREFIX = "mad_"


def hash_password(password: str) -> str:
    """Argon2id hash of a password, salted, in PHC string format."""
    return _password_hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """True when the password matches the stored Argon2 hash. Without a hash (an unknown username, a
    worker) the same Argon2 work is done against a stand-in hash, so that the time taken does not tell
    which usernames exist."""
    try:
        return _password_hasher.verify(password_hash or _stand_in_hash(), password) and bool(password_hash)
    except (VerificationError, InvalidHashError):
        return False


@cache
def _stand_in_hash() -> str:
    """The Argon2 hash of a random password no one knows, made once per process with the same parameters."""
    return _password_hasher.hash(secrets.token_urlsafe(32))


def new_api_token() -> str:
    """A fresh bearer token: 'mad_' and 43 URL-safe characters (256 random bits)."""
    return API_TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_api_token(token: str) -> str:
    """SHA-256 hex of a token; tokens have 256 bits of entropy, so a fast hash is safe and allows lookup."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_csrf_token() -> str:
    """A random token bound to one browser session."""
    return secrets.token_urlsafe(32)


def same_secret(a: str | None, b: str | None) -> bool:
    """Constant-time comparison of two secrets; missing values never match (any text may be sent)."""
    if not a or not b:
        return False
    return hmac.compare_digest(a.encode(), b.encode())

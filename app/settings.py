"""Service settings, read from MAD_* environment variables (and a .env file) by pydantic-settings."""

import re
from functools import cached_property
from ipaddress import ip_address
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.storage import BlobStore, open_blob_store

S3_LOCATION = r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9_.-]+)*/?"
STORAGE_URL = re.compile(rf"{S3_LOCATION}|file:///.*")
DEVELOPMENT_SECRET_KEY = "development-only-secret-key-do-not-use-in-production"
MIN_SECRET_KEY_LENGTH = 32


class OpenIDProvider(BaseModel):
    """One OpenID Connect provider people may sign in with, and who may join through it (README,
    "Signing in with OpenID Connect")."""

    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,31}$", description="Short name in the sign-in URLs: /login/sso/NAME."
    )
    display_name: str = Field(
        min_length=1, max_length=60, description="Shown on its button: 'Sign in with …'."
    )
    issuer: str = Field(description="The issuer URL; its /.well-known/openid-configuration must name it.")
    client_id: str = Field(min_length=1)
    client_secret: SecretStr
    allowed_domains: list[str] = Field(
        default_factory=list,
        description="E-mail domains whose people may join by signing in (the provider must say the address "
        "is verified); others need an invitation.",
    )
    role: Literal["annotator", "admin"] = Field(
        default="annotator", description="The role of an account made by signing in without an invitation."
    )

    @field_validator("issuer")
    @classmethod
    def _issuer_is_https(cls, issuer: str) -> str:
        """https, or http on this machine only (a provider in tests or development)."""
        url = urlsplit(issuer)
        if url.scheme == "https" and url.hostname:
            return issuer
        if url.scheme == "http" and url.hostname is not None and is_loopback(url.hostname):
            return issuer
        raise ValueError(f"{issuer!r} is not an https:// URL (http:// only on 127.0.0.1 or localhost)")

    @field_validator("allowed_domains")
    @classmethod
    def _domains_in_lower_case(cls, domains: list[str]) -> list[str]:
        """Domains compare in lower case, without a leading @."""
        return [domain.strip().lower().removeprefix("@") for domain in domains]


class Settings(BaseSettings):
    """Everything the service, the CLI and the workers read from the environment."""

    model_config = SettingsConfigDict(env_prefix="MAD_", env_file=".env", extra="ignore")

    env: Literal["development", "test", "production"] = "development"
    data_dir: Path = Field(
        default=Path("data"),
        description="The SQLite database, worker caches, and the blobs unless MAD_STORAGE_URL is set.",
    )
    storage_url: str = Field(
        default="",
        description="Where images, thumbnails, weights and predictions live: empty for the data dir, "
        "s3://bucket/prefix (endpoint and credentials from the AWS environment and config files) or "
        "file:///absolute/path.",
    )
    database_url: str = Field(default="", description="SQLAlchemy URL; empty means SQLite in the data dir.")
    secret_key: str = Field(
        default=DEVELOPMENT_SECRET_KEY,
        description="Signs session cookies; release pseudonyms use a key derived from it (`mad release` "
        "refuses the development key).",
    )
    db_pool_size: int = Field(
        default=4,
        ge=1,
        description="Postgres connections per server process, and so the requests it lets into the database "
        "at once; more wait for one.",
    )
    max_upload_bytes: int = Field(
        default=4 * 1024**3,
        gt=0,
        description="Largest upload body (images or archives, weights or predictions, a worker's shard).",
    )
    max_json_bytes: int = Field(
        default=1024**2,
        gt=0,
        description="Largest body of any other request (JSON, forms); a competition's 8 MiB.",
    )
    max_translation_bytes: int = Field(
        default=16 * 1024**2,
        gt=0,
        description="Largest translation file (PUT …/translations, `mad competitions translate`).",
    )
    header_timeout_s: float = Field(
        default=10, gt=0, description="A connection that has not sent a whole request head by then is closed."
    )
    max_connections: int = Field(
        default=1000, ge=1, description="Connections one server process holds at once; more are answered 503."
    )
    max_image_bytes: int = Field(default=50 * 1024 * 1024, gt=0, description="Largest image file accepted.")
    max_image_pixels: int = Field(
        default=89_478_485, gt=0, description="Pillow's decompression-bomb limit (width × height)."
    )
    max_archive_bytes: int = Field(
        default=64 * 1024**3, gt=0, description="Most bytes the members of one archive may expand to."
    )
    max_archive_members: int = Field(
        default=100_000, gt=0, description="Most entries a zip archive may list (its directory is loaded)."
    )
    max_compression_ratio: int = Field(
        default=100,
        ge=1,
        description="Most a zip member, or a whole archive, may expand relative to its compressed size.",
    )
    thumbnail_size: int = Field(default=320, ge=32, le=2048, description="Longest thumbnail side in pixels.")
    import_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default=[],
        description="Comma-separated host names, addresses and networks (10.0.0.0/8) that manifest URLs may "
        "reach although they are loopback, private, link-local or otherwise not public (refused by default).",
    )
    import_allowed_s3: Annotated[list[str], NoDecode] = Field(
        default=[],
        description="Comma-separated s3://bucket/prefix locations that a manifest's s3:// rows may read "
        "besides the storage's own bucket and prefix (MAD_STORAGE_URL); rows elsewhere are refused unread.",
    )
    import_url_deadline_s: float = Field(
        default=60, gt=0, description="Most seconds one manifest URL may take, redirects and body included."
    )
    job_lease_s: int = Field(default=120, ge=1, description="Lease length without a heartbeat.")
    job_max_attempts: int = Field(default=3, ge=1, description="Tries before a job fails.")
    predict_shard_size: int = Field(
        default=16_384,
        ge=1,
        description="Images per prediction job: claiming and uploading one costs the service about 50 ms "
        "(benchmarks/gpu_feed.py), under 5% of a shard's time at 10,000 images/s from about 10,000 images.",
    )
    login_max_failures: int = Field(
        default=10, ge=1, description="Failed sign-ins allowed per address and username per window."
    )
    login_max_address_failures: int = Field(
        default=30,
        ge=1,
        description="Failed sign-ins allowed per address, whatever the usernames, per window.",
    )
    login_window_s: int = Field(default=300, ge=1, description="Window of login_max_failures, seconds.")
    study_arrivals_per_minute: int = Field(
        default=60,
        ge=1,
        description="New participants one crowd study admits per minute; more are asked to try again shortly "
        "(a leaked study link cannot make accounts faster than this).",
    )
    metrics_token: str = Field(
        default="",
        description="Bearer token that reads /metrics (Prometheus); empty: /metrics is off (404).",
    )
    session_max_age_s: int = Field(default=14 * 24 * 3600, gt=0, description="Login cookie lifetime.")
    oidc_providers: list[OpenIDProvider] = Field(
        default_factory=list,
        description="OpenID Connect providers to sign in with, as a JSON list of objects (OpenIDProvider).",
    )
    password_sign_in: bool = Field(
        default=True,
        description="Whether the browser's sign-in and invitation pages take passwords; off, people sign in "
        "through the OpenID providers only (the CLI and API tokens keep working).",
    )

    @model_validator(mode="after")
    def _refuse_development_secret(self) -> "Settings":
        """Outside development, a real secret key is required."""
        if self.env != "development" and not self.has_real_secret_key:
            raise ValueError(
                f"MAD_SECRET_KEY must be a random string of at least {MIN_SECRET_KEY_LENGTH} characters "
                f"when MAD_ENV={self.env} "
                "(for example: python -c 'import secrets; print(secrets.token_urlsafe(48))')"
            )
        return self

    @property
    def has_real_secret_key(self) -> bool:
        """Whether MAD_SECRET_KEY is the deployment's own: not the public development key, 32+ characters."""
        return self.secret_key != DEVELOPMENT_SECRET_KEY and len(self.secret_key) >= MIN_SECRET_KEY_LENGTH

    @field_validator("import_allowed_hosts", "import_allowed_s3", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        """A comma-separated string becomes its non-empty items."""
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @model_validator(mode="after")
    def _someone_can_sign_in(self) -> "Settings":
        """Password sign-in can be off only with a provider to sign in with; provider names are unique."""
        if not self.password_sign_in and not self.oidc_providers:
            raise ValueError("MAD_PASSWORD_SIGN_IN=false needs at least one provider in MAD_OIDC_PROVIDERS")
        names = [provider.name for provider in self.oidc_providers]
        if len(set(names)) != len(names):
            raise ValueError(f"MAD_OIDC_PROVIDERS names must differ: {names}")
        return self

    @field_validator("import_allowed_s3")
    @classmethod
    def _s3_locations_are_known(cls, locations: list[str]) -> list[str]:
        """Each one s3://bucket or s3://bucket/prefix."""
        for location in locations:
            if not re.fullmatch(S3_LOCATION, location):
                raise ValueError(f"{location!r} is not s3://bucket/prefix")
        return locations

    @field_validator("storage_url")
    @classmethod
    def _storage_url_is_known(cls, url: str) -> str:
        """Empty, s3://bucket/prefix or file:///absolute/path."""
        if url and not STORAGE_URL.fullmatch(url):
            raise ValueError(f"{url!r} is not s3://bucket/prefix or file:///absolute/path")
        return url

    @cached_property
    def blob_store(self) -> BlobStore:
        """Where every image, thumbnail, weights file and prediction shard lives (app.storage)."""
        return open_blob_store(self.storage_url, self.data_dir)

    @property
    def import_s3_locations(self) -> list[str]:
        """The s3://bucket/prefix locations a manifest's rows may read: MAD_IMPORT_ALLOWED_S3, and the
        storage's own when it is on S3."""
        own = [self.storage_url] if self.storage_url.startswith("s3://") else []
        return own + self.import_allowed_s3

    @cached_property
    def sqlalchemy_url(self) -> str:
        """The database URL, defaulting to an SQLite file inside the data dir."""
        if self.database_url:
            return _with_psycopg_driver(self.database_url)
        return f"sqlite:///{(self.data_dir / 'mad.sqlite3').resolve()}"


def is_loopback(host: str) -> bool:
    """Whether a host name or address is this machine."""
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def _with_psycopg_driver(url: str) -> str:
    """postgres:// and postgresql:// URLs use psycopg 3, the driver this project installs."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url

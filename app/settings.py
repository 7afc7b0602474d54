"""Service settings, read from MAD_* environment variables (and a .env file) by pydantic-settings."""

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEVELOPMENT_SECRET_KEY = "development-only-secret-key-do-not-use-in-production"


class Settings(BaseSettings):
    """Everything the service, the CLI and the workers read from the environment."""

    model_config = SettingsConfigDict(env_prefix="MAD_", env_file=".env", extra="ignore")

    env: Literal["development", "test", "production"] = "development"
    data_dir: Path = Field(default=Path("data"), description="Images, thumbnails, weights and predictions.")
    database_url: str = Field(default="", description="SQLAlchemy URL; empty means SQLite in the data dir.")
    secret_key: str = Field(default=DEVELOPMENT_SECRET_KEY, description="Signs session cookies.")
    db_pool_size: int = Field(
        default=4,
        ge=1,
        description="Postgres connections per server process, and so the requests it lets into the database "
        "at once; more wait for one.",
    )
    max_image_bytes: int = Field(default=50 * 1024 * 1024, gt=0, description="Largest image file accepted.")
    max_image_pixels: int = Field(
        default=89_478_485, gt=0, description="Pillow's decompression-bomb limit (width × height)."
    )
    thumbnail_size: int = Field(default=320, ge=32, le=2048, description="Longest thumbnail side in pixels.")
    job_lease_s: int = Field(default=120, ge=1, description="Lease length without a heartbeat.")
    job_max_attempts: int = Field(default=3, ge=1, description="Tries before a job fails.")
    predict_shard_size: int = Field(default=4096, ge=1, description="Images per prediction job.")
    login_max_failures: int = Field(default=10, ge=1, description="Failed sign-ins allowed per window.")
    login_window_s: int = Field(default=300, ge=1, description="Window of login_max_failures, seconds.")
    session_max_age_s: int = Field(default=14 * 24 * 3600, gt=0, description="Login cookie lifetime.")

    @model_validator(mode="after")
    def _refuse_development_secret(self) -> "Settings":
        """Outside development, a real secret key is required."""
        if self.env != "development" and (
            self.secret_key == DEVELOPMENT_SECRET_KEY or len(self.secret_key) < 32
        ):
            raise ValueError(
                f"MAD_SECRET_KEY must be a random string of at least 32 characters when MAD_ENV={self.env} "
                "(for example: python -c 'import secrets; print(secrets.token_urlsafe(48))')"
            )
        return self

    @property
    def predictions_dir(self) -> Path:
        """Prediction shards: <data dir>/predictions/<classifier id>/."""
        return self.data_dir / "predictions"

    @property
    def weights_dir(self) -> Path:
        """Uploaded classifier weights: <data dir>/weights/<sha256>.<format>."""
        return self.data_dir / "weights"

    @cached_property
    def sqlalchemy_url(self) -> str:
        """The database URL, defaulting to an SQLite file inside the data dir."""
        if self.database_url:
            return _with_psycopg_driver(self.database_url)
        return f"sqlite:///{(self.data_dir / 'mad.sqlite3').resolve()}"


def _with_psycopg_driver(url: str) -> str:
    """postgres:// and postgresql:// URLs use psycopg 3, the driver this project installs."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url

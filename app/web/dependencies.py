"""Dependencies the web edges share: the application's settings."""

from typing import Annotated

from fastapi import Depends, Request

from app.settings import Settings


async def app_settings(request: Request) -> Settings:
    """The settings the application was made with (async: it reads no database, so it needs no thread)."""
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(app_settings)]

"""``/v1/user``: the caller's own account (who they are) and settings: the public SSH key
their pods get as ``PUBLIC_KEY``, which GraphQL's ``updateUserSettings`` (the runpod SDK's
``update_user_settings``) sets too."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from skiff.api.documented_errors import BAD
from skiff.api.needs import needs
from skiff.domain.input_types import StrictInput, Text
from skiff.domain.permissions import READ, WRITE
from skiff.domain.users import User
from skiff.services.hub import Services


class UserOut(BaseModel):
    id: str
    name: str
    pubKey: str = Field(
        description="Your public SSH key(s), one a line; your pods get it as `PUBLIC_KEY`"
    )


class UserSettingsIn(StrictInput):
    pubKey: Text = Field(
        description="Public SSH key(s), one a line (`ssh-ed25519 AAAA... you@host`); empty "
        "removes it. Your pods started from now on get it as `PUBLIC_KEY`, as on the hosted "
        "platform, so an image that runs sshd lets you in."
    )


def router(services: Services, user_dep: Any) -> APIRouter:
    user_routes = APIRouter(prefix="/user", tags=["user"])
    UserDep = Annotated[User, Depends(user_dep)]

    async def out(user: User) -> UserOut:
        pub_key = await services.user_settings.pub_key(user)
        return UserOut(id=user.id, name=user.name, pubKey=pub_key or "")

    @user_routes.get("", response_model=UserOut)
    @needs(READ)
    async def get_user(user: UserDep) -> UserOut:
        """Who your API key belongs to, and your settings."""
        return await out(user)

    @user_routes.patch("", response_model=UserOut, responses=BAD)
    @needs(WRITE)
    async def update_user(body: UserSettingsIn, user: UserDep) -> UserOut:
        """Change your settings (your public SSH key)."""
        await services.user_settings.set_pub_key(user, body.pubKey)
        return await out(user)

    return user_routes

"""``/v1/webhooksecret``: the caller's webhook signing secret (read, rotate), with which every
job webhook of their endpoints is signed."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from skiff.api.needs import needs
from skiff.domain.permissions import WRITE
from skiff.domain.users import User
from skiff.services.hub import Services


class WebhookSecretOut(BaseModel):
    secret: str = Field(
        description="Standard Webhooks signing secret: `whsec_` + base64 of 32 random bytes"
    )


def router(services: Services, user_dep: Any) -> APIRouter:
    webhooks = APIRouter(prefix="/webhooksecret", tags=["webhooks"])
    UserDep = Annotated[User, Depends(user_dep)]

    @webhooks.get("", response_model=WebhookSecretOut)
    # Its holder can sign webhooks as this server: a read-only key does not read it.
    @needs(WRITE)
    async def get_webhook_secret(user: UserDep) -> WebhookSecretOut:
        """Your webhook signing secret, made on first use.

        Every job webhook of your endpoints is signed the Standard Webhooks way
        (https://www.standardwebhooks.com): headers `webhook-id` (the delivery id, the same on
        every attempt: deduplicate on it), `webhook-timestamp` (Unix seconds) and
        `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`. A receiver
        verifies the raw body with any Standard Webhooks library, e.g. in Python
        `standardwebhooks.Webhook(secret).verify(body, headers)`, and answers 200; any other
        answer is tried again, 3 attempts in all, 10 s apart."""
        return WebhookSecretOut(secret=await services.webhooks.secret(user.id))

    @webhooks.post("/rotate", response_model=WebhookSecretOut)
    @needs(WRITE)
    async def rotate_webhook_secret(user: UserDep) -> WebhookSecretOut:
        """Replace your webhook signing secret; the old one stops working at once.

        Every attempt from now on is signed with the new secret, retries of deliveries made
        before included, so update your receivers with it (verify as described under
        `GET /webhooksecret`)."""
        return WebhookSecretOut(secret=await services.webhooks.rotate_secret(user.id))

    return webhooks

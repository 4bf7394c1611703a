"""Public model endpoints: an administrator's queue-based endpoint published under a model id
(``all-minilm-l6-v2``), which every user with a key calls as ``/v2/{model_id}/...`` with the
usual bodies. Each caller's jobs are theirs alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, StringConstraints

from skiff.domain.input_types import StrictInput, Text

#: Lower-case letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit: it
#: stands where an endpoint id does in a URL.
MODEL_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
ModelId = Annotated[Text, StringConstraints(pattern=MODEL_ID_PATTERN)]


class PublishInput(StrictInput):
    """``POST /v1/models``: publish one of your endpoints under a model id."""

    modelId: ModelId = Field(
        description="What callers put in place of the endpoint id: /v2/{modelId}/run. Lower-case "
        "letters, digits, '.', '_' and '-', at most 64"
    )
    endpointId: Text = Field(min_length=1, max_length=191)
    description: Text = Field(default="", max_length=1000)


@dataclass(frozen=True, slots=True)
class PublicModel:
    model_id: str
    endpoint_id: str
    description: str
    #: The administrator who published it.
    published_by: str
    created_at: float

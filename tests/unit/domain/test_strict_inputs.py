"""The management API's input models: strict types, bounds on every field, and text that every
store (PostgreSQL included) and every worker process can hold."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from skiff.domain.endpoints import SCALER_VALUE_MAX, EndpointCreate, EndpointUpdate
from skiff.domain.registry_auths import RegistryAuthCreate
from skiff.domain.templates import Template, TemplateCreate, TemplateUpdate


def refused_at(model: type[BaseModel], data: dict[str, Any]) -> tuple[str, str]:
    """The field (dotted) and message of the first refusal."""
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    error = info.value.errors()[0]
    return ".".join(str(p) for p in error["loc"]), str(error["msg"])


ENDPOINT = {"templateId": "t1"}
TEMPLATE = {"name": "t", "imageName": "img"}


@pytest.mark.parametrize("value", ["3", True, False, 3.5, float("inf"), float("nan"), None])
@pytest.mark.parametrize("field", ["workersMax", "workersMin", "gpuCount", "scalerValue"])
def test_an_endpoint_number_must_be_a_json_integer(field: str, value: Any) -> None:
    if value is None:  # null leaves the field unset
        assert getattr(EndpointCreate.model_validate({**ENDPOINT, field: None}), field) is None
        return
    assert refused_at(EndpointCreate, {**ENDPOINT, field: value})[0] == field


def test_an_integral_number_written_with_a_fraction_is_that_integer() -> None:
    created = EndpointCreate.model_validate({**ENDPOINT, "workersMax": 3.0, "idleTimeout": 60.0})
    assert created.workersMax == 3 and isinstance(created.workersMax, int)
    assert created.idleTimeout == 60


@pytest.mark.parametrize("value", [1, 0, "true", "yes"])
def test_a_boolean_must_be_a_json_boolean(value: Any) -> None:
    assert refused_at(EndpointCreate, {**ENDPOINT, "flashboot": value})[0] == "flashboot"
    assert refused_at(TemplateCreate, {**TEMPLATE, "isPublic": value})[0] == "isPublic"


@pytest.mark.parametrize("value", [2**64, SCALER_VALUE_MAX + 1, 0])
def test_scaler_value_has_bounds(value: int) -> None:
    field, message = refused_at(EndpointCreate, {**ENDPOINT, "scalerValue": value})
    assert field == "scalerValue" and "than or equal to" in message


def test_every_bound_of_a_number_is_in_the_openapi_schema() -> None:
    for model in (EndpointCreate, EndpointUpdate, TemplateCreate, TemplateUpdate):
        for name, prop in model.model_json_schema()["properties"].items():
            options = prop.get("anyOf", [prop])
            for option in options:
                if option.get("type") == "integer":
                    assert "minimum" in option and "maximum" in option, (model, name)


@pytest.mark.parametrize(
    ("model", "data", "field"),
    [
        (TemplateCreate, {**TEMPLATE, "env": {"A": "\udfff"}}, "env"),
        (TemplateCreate, {**TEMPLATE, "env": {"A\x00": "x"}}, "env"),
        (TemplateCreate, {**TEMPLATE, "name": "n\x00m"}, "name"),
        (TemplateCreate, {**TEMPLATE, "dockerStartCmd": ["python", "a\x00"]}, "dockerStartCmd"),
        (TemplateUpdate, {"env": {"A": "\ud800x"}}, "env"),
        (TemplateUpdate, {"readme": "\x00"}, "readme"),
        (EndpointCreate, {"templateId": "t\x00"}, "templateId"),
        (EndpointCreate, {**ENDPOINT, "gpuTypeIds": ["\udfff"]}, "gpuTypeIds"),
        (EndpointUpdate, {"env": {"K": "v\x00"}}, "env"),
        (EndpointUpdate, {"networkVolumeId": "\x00"}, "networkVolumeId"),
        (RegistryAuthCreate, {"name": "r", "username": "u", "password": "p\x00w"}, "password"),
        (RegistryAuthCreate, {"name": "r", "username": "\udc80", "password": "p"}, "username"),
    ],
)
def test_text_with_nul_or_a_lone_surrogate_is_refused_at_its_field(
    model: type[BaseModel], data: dict[str, Any], field: str
) -> None:
    where, message = refused_at(model, data)
    assert where == field
    assert "NUL" in message or "surrogate" in message


def test_lists_and_maps_have_bounds() -> None:
    assert refused_at(EndpointCreate, {**ENDPOINT, "gpuTypeIds": [str(i) for i in range(65)]})
    env = {f"K{i}": "v" for i in range(1001)}
    assert refused_at(TemplateCreate, {**TEMPLATE, "env": env})[0] == "env"


def test_a_stored_template_loads_even_if_it_predates_the_text_checks() -> None:
    stored = Template.model_validate_json(
        '{"id": "x", "name": "a", "imageName": "b", "env": {"A": "\\u0000"}}'
    )
    assert stored.env == {"A": "\x00"}

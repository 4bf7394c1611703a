"""From the console's forms to the API's input models, and their errors back to fields."""

from __future__ import annotations

import pytest

from skiff.console import forms
from skiff.domain.endpoints import EndpointCreate, EndpointUpdate
from skiff.domain.pods import PodCreate
from skiff.domain.templates import TemplateCreate
from skiff.domain.volumes import NetworkVolumeCreate, NetworkVolumeUpdate
from skiff.errors import Conflict, Invalid


def endpoint_form(**fields: str) -> dict[str, str]:
    return {"name": "ep", "templateId": "tpl", "computeType": "CPU", **fields}


def test_a_full_endpoint_form_becomes_the_create_model() -> None:
    data, errors = forms.endpoint_data(
        endpoint_form(
            gpuTypeIds="NVIDIA A100\n\n  NVIDIA L4  \n",
            gpuCount="2",
            workersMin="0",
            workersMax="3",
            idleTimeout="30",
            scalerType="REQUEST_COUNT",
            scalerValue="2",
            executionTimeoutMs="60000",
            env="A=1\n# a comment\nB = two=2\n",
            flashboot="on",
        ),
        creating=True,
    )
    model, invalid = forms.validate(EndpointCreate, data, forms.ENDPOINT_FIELDS, "workersMin")
    assert errors == {} and invalid == {} and model is not None
    assert model.gpuTypeIds == ["NVIDIA A100", "NVIDIA L4"]
    assert (model.gpuCount, model.workersMax, model.scalerValue) == (2, 3, 2)
    assert model.env == {"A": "1", "B": " two=2"}
    assert model.flashboot is True


def test_empty_numbers_are_left_to_the_defaults() -> None:
    data, _ = forms.endpoint_data(endpoint_form(gpuCount="", workersMax=" "), creating=True)
    assert "gpuCount" not in data and "workersMax" not in data
    model, _ = forms.validate(EndpointCreate, data, forms.ENDPOINT_FIELDS, "workersMin")
    assert model is not None and model.gpuCount is None


def test_an_edit_sends_emptied_lists_and_fixed_compute_type_is_left_out() -> None:
    data, _ = forms.endpoint_data(endpoint_form(gpuTypeIds="", env=""), creating=False)
    assert data["gpuTypeIds"] == [] and data["env"] == {} and "computeType" not in data
    assert data["flashboot"] is False


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"gpuCount": "two"}, "gpuCount", "valid integer"),
        ({"gpuCount": "99"}, "gpuCount", "less than or equal to 16"),
        ({"workersMin": "3", "workersMax": "1"}, "workersMin", "not be greater than workersMax"),
        ({"scalerType": "SOMETIMES"}, "scalerType", "QUEUE_DELAY"),
        ({"gpuTypeIds": "A\nA"}, "gpuTypeIds", "must not repeat"),
        ({"templateId": ""}, "templateId", "required"),
    ],
)
def test_each_refusal_lands_on_its_field(fields: dict[str, str], field: str, words: str) -> None:
    data, errors = forms.endpoint_data(endpoint_form(**fields), creating=True)
    model, invalid = forms.validate(EndpointCreate, data, forms.ENDPOINT_FIELDS, "workersMin")
    assert model is None and errors == {}
    assert words in invalid[field], invalid


def test_a_bad_env_line_is_named() -> None:
    _, errors = forms.endpoint_data(endpoint_form(env="A=1\nno equals sign"), creating=False)
    assert errors == {"env": "line 2: expected KEY=VALUE"}


def test_update_model_checks_min_against_max_too() -> None:
    data, _ = forms.endpoint_data(endpoint_form(workersMin="5", workersMax="2"), creating=False)
    _, invalid = forms.validate(EndpointUpdate, data, forms.ENDPOINT_FIELDS, "workersMin")
    assert "workersMin" in invalid


def test_a_template_form_splits_commands_like_a_shell() -> None:
    data, errors = forms.template_data(
        {
            "t_name": "tpl",
            "t_imageName": "img",
            "t_dockerStartCmd": "python 'my handler.py' --flag",
            "t_env": "X=1",
        },
        prefix="t_",
    )
    assert errors == {}
    model, invalid = forms.validate(TemplateCreate, data, forms.TEMPLATE_FIELDS, "name")
    assert invalid == {} and model is not None
    assert model.dockerStartCmd == ["python", "my handler.py", "--flag"]
    assert forms.format_command(model.dockerStartCmd) == "python 'my handler.py' --flag"


def test_template_errors_keep_the_forms_own_names() -> None:
    data, errors = forms.template_data({"t_dockerStartCmd": "python 'open"}, prefix="t_")
    assert list(errors) == ["t_dockerStartCmd"]
    _, invalid = forms.validate(TemplateCreate, data, forms.TEMPLATE_FIELDS, "name")
    assert set(forms.prefixed(invalid, "t_")) == {"t_name", "t_imageName"}


def test_service_refusals_land_on_their_field_without_its_prefix() -> None:
    missing = Invalid("templateId: no template x", field="templateId")
    assert forms.service_error(missing, "name") == {"templateId": "no template x"}
    taken = Conflict("a template named 'x' already exists")
    assert forms.service_error(taken, "name") == {"name": "a template named 'x' already exists"}


def test_a_pod_forms_mount_path_is_checked_by_the_apis_rule_at_its_field() -> None:
    data, errors = forms.pod_data({"imageName": "busybox", "volumeMountPath": " /etc "})
    assert errors == {} and data["volumeMountPath"] == "/etc"
    _, invalid = forms.validate(PodCreate, data, forms.POD_FIELDS, "imageName")
    assert list(invalid) == ["volumeMountPath"]
    assert "system directory" in invalid["volumeMountPath"]
    assert "/workspace" in invalid["volumeMountPath"]
    # A template's stored value refused at the pod's creation lands there too.
    refused = Invalid("volumeMountPath: template t's volumeMountPath ...", field="volumeMountPath")
    assert list(forms.service_error(refused, "gpuTypeIds")) == ["volumeMountPath"]


def test_no_volume_chosen_is_left_out_of_a_new_endpoint_and_detaches_on_an_edit() -> None:
    created, _ = forms.endpoint_data(endpoint_form(networkVolumeId=""), creating=True)
    assert "networkVolumeId" not in created
    edited, _ = forms.endpoint_data(endpoint_form(networkVolumeId=""), creating=False)
    model, _ = forms.validate(EndpointUpdate, edited, forms.ENDPOINT_FIELDS, "workersMin")
    assert model is not None and "networkVolumeId" in model.model_fields_set
    assert model.networkVolumeId is None


def test_a_chosen_volume_goes_to_the_api_as_its_id() -> None:
    for creating in (True, False):
        data, _ = forms.endpoint_data(endpoint_form(networkVolumeId="vol1"), creating)
        assert data["networkVolumeId"] == "vol1"


def test_a_volume_form_becomes_the_api_input_and_its_refusals_land_on_their_fields() -> None:
    data = forms.volume_data({"name": " models ", "size": "50"})
    model, invalid = forms.validate(NetworkVolumeCreate, data, forms.VOLUME_FIELDS, "name")
    assert invalid == {} and model is not None and (model.name, model.size) == ("models", 50)
    bad = forms.volume_data({"name": "", "size": "lots"})
    _, invalid = forms.validate(NetworkVolumeCreate, bad, forms.VOLUME_FIELDS, "name")
    assert set(invalid) == {"name", "size"} and "valid integer" in invalid["size"]
    _, invalid = forms.validate(NetworkVolumeCreate, {"name": "m", "size": 4001}, ["size"], "name")
    assert "less than or equal to 4000" in invalid["size"]


def test_a_volume_edit_leaves_out_what_was_left_empty() -> None:
    data = forms.volume_data({"name": "", "size": "7"})
    model, invalid = forms.validate(NetworkVolumeUpdate, data, forms.VOLUME_FIELDS, "name")
    assert invalid == {} and model is not None and (model.name, model.size) == (None, 7)


@pytest.mark.parametrize(
    ("typed", "shown"),
    [
        (
            '{"input": {}, "s3Config": {"accessId": "A", "accessSecret": "se\\"cret", "x": 1}}',
            '{"input": {}, "s3Config": {"accessId": "A", "accessSecret": "", "x": 1}}',
        ),
        # A string left open (why the body was refused): the rest of its line goes.
        (
            '{"s3Config": {"accessSecret" :  "open secret\n}}',
            '{"s3Config": {"accessSecret" :  ""\n}}',
        ),
        ('{"input": {"accessSecretive": "kept"}}', '{"input": {"accessSecretive": "kept"}}'),
    ],
)
def test_a_refused_job_body_comes_back_without_its_s3_secret(typed: str, shown: str) -> None:
    assert forms.without_s3_secret(typed) == shown

"""KServe internals the server relies on (serving.kserve_compat) still exist as used: this test
fails by name when a KServe upgrade changes one of them."""

from __future__ import annotations

import pytest

from serving import kserve_compat


def test_every_kserve_internal_is_there_with_the_parameters_relied_on():
    assert kserve_compat.check_internals() == []


def test_a_changed_internal_is_reported_by_name(monkeypatch):
    monkeypatch.setitem(
        kserve_compat.INTERNALS, "kserve.protocol.rest.server:RESTServer.__init__", ("nope",)
    )
    monkeypatch.setitem(kserve_compat.INTERNALS, "kserve.model_server:ModelServer._gone", ())
    problems = kserve_compat.check_internals()
    assert any("RESTServer.__init__: parameters" in p for p in problems), problems
    assert any("ModelServer._gone: missing" in p for p in problems), problems


@pytest.mark.parametrize("cls", sorted(kserve_compat.INSTANCE_ATTRIBUTES))
def test_instance_attributes_relied_on(cls, loaded_model):
    from kserve import ModelServer

    from serving.server import install_error_handlers

    server = ModelServer(http_port=0, enable_grpc=False, enable_latency_logging=False)
    server.register_model(loaded_model)
    obj = server
    if cls == "RESTServer":
        obj = kserve_compat.make_rest_server(
            server, loaded_model.limits, install_error_handlers, 0, "127.0.0.1"
        )
        assert obj.config.host == "127.0.0.1"
    for attr in kserve_compat.INSTANCE_ATTRIBUTES[cls]:
        assert getattr(obj, attr) is not None, f"{cls}.{attr}"

"""Every use of KServe internals, in one place (KServe 0.21, pinned in pyproject.toml).

The server needs three things KServe's public API does not offer: a configurable bind address,
V1 routes without KServe's V2 set (whose model-repository API lets any client unload the
model), and its own error handlers and body-size middleware. They come from subclassing
``kserve.protocol.rest.server.RESTServer`` and calling a few underscore methods, listed in
:data:`INTERNALS` with the parameters relied on. ``tests/serving/test_kserve_compat.py`` checks
them against the installed KServe, so an upgrade that changes any of them fails that test by
name instead of breaking the server at run time.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

# "module:attribute[.method]" -> parameter names relied on (in order, ``self`` excluded).
INTERNALS: dict[str, tuple[str, ...]] = {
    "kserve.model_server:parser": (),
    "kserve.protocol.rest.server:RESTServer.__init__": (
        "app",
        "data_plane",
        "model_repository_extension",
        "http_port",
        "access_log_format",
        "workers",
        "grace_period",
        "event_loop",
        "timeout_keep_alive",
    ),
    "kserve.protocol.rest.server:RESTServer._add_exception_handlers": ("app",),
    "kserve.protocol.rest.server:RESTServer._register_endpoints": ("app",),
    "kserve.protocol.rest.server:RESTServer._add_middlewares": ("app",),
    "kserve.protocol.rest.server:RESTServer.start": (),
    "kserve.protocol.rest.server:metrics_handler": ("request",),
    "kserve.protocol.rest.v1_endpoints:register_v1_endpoints": (
        "app",
        "dataplane",
        "model_repository_extension",
    ),
    "kserve.model_server:ModelServer._register_and_check_atleast_one_model_is_ready": ("models",),
    "kserve.model_server:ModelServer.setup_event_loop": (),
    "kserve.protocol.grpc.server:GRPCServer.__init__": (
        "port",
        "data_plane",
        "model_repository_extension",
        "kwargs",
    ),
    "kserve.protocol.grpc.server:GRPCServer.start": ("max_workers",),
}
# Attributes of RESTServer / ModelServer instances used here.
INSTANCE_ATTRIBUTES = {
    "RESTServer": ("dataplane", "model_repository_extension", "config"),
    "ModelServer": ("dataplane", "model_repository_extension"),
}


def _resolve(name: str) -> Callable:
    module, _, path = name.partition(":")
    obj = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def check_internals() -> list[str]:
    """What differs between :data:`INTERNALS` and the installed KServe (empty when all match)."""
    problems = []
    for name, params in INTERNALS.items():
        try:
            obj = _resolve(name)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{name}: missing ({exc})")
            continue
        if not callable(obj) or not params:
            continue
        found = [p for p in inspect.signature(obj).parameters if p != "self"]
        if tuple(found[: len(params)]) != params:
            problems.append(f"{name}: parameters {found}, relied on {list(params)}")
    return problems


def kserve_parser():
    """KServe's model-server ``argparse`` parser (the parent of ours)."""
    from kserve.model_server import parser

    return parser


def rest_server_class(install_handlers: Callable):
    """``RESTServer`` subclass: V1 routes only, ``install_handlers(app, limits)`` after
    KServe's own handlers, and ``build_app()`` for a TestClient."""
    from kserve.protocol.rest.server import RESTServer

    class FashionRESTServer(RESTServer):
        limits = None

        def _add_exception_handlers(self, app):
            super()._add_exception_handlers(app)
            install_handlers(app, self.limits)

        def _register_endpoints(self, app):
            # KServe's own registration minus V2: V1 only, like the cluster's TF Serving
            # runtime. KServe's V2 set includes the model-repository API, whose unauthenticated
            # /unload would take the model down for good (its /load cannot bring it back).
            from fastapi import APIRouter
            from kserve.protocol.rest.server import metrics_handler
            from kserve.protocol.rest.v1_endpoints import register_v1_endpoints

            root_router = APIRouter()
            root_router.add_api_route(r"/", self.dataplane.live)
            root_router.add_api_route(r"/metrics", metrics_handler, methods=["GET"])
            app.include_router(root_router)
            register_v1_endpoints(app, self.dataplane, self.model_repository_extension)

        def build_app(self):
            """A fresh FastAPI app wired like KServe's ``create_application``."""
            from fastapi import FastAPI
            from fastapi.responses import ORJSONResponse

            app = FastAPI(
                title="fashion-mnist", default_response_class=ORJSONResponse, docs_url=None
            )
            self._add_middlewares(app)
            self._register_endpoints(app)
            self._add_exception_handlers(app)
            return app

    return FashionRESTServer


def make_rest_server(
    model_server, limits, install_handlers: Callable, http_port: int, host: str, **kwargs
):
    """A :func:`rest_server_class` instance for ``model_server`` bound to ``host:http_port``.

    Args:
        model_server: a ``kserve.ModelServer`` with the model registered.
        limits: the request limits handed to ``install_handlers``.
        install_handlers: ``(app, limits) -> None``.
        http_port: TCP port.
        host: bind address.
        kwargs: passed on to ``RESTServer`` (``access_log_format``, ``event_loop``, ...).
    """
    rest = rest_server_class(install_handlers)(
        "kserve.model_server:app",
        model_server.dataplane,
        model_server.model_repository_extension,
        http_port,
        **kwargs,
    )
    rest.limits = limits
    rest.config.host = host
    return rest


def register_ready_models(model_server, models: list) -> None:
    """What ``ModelServer.start()`` does before serving: register, and require one ready."""
    model_server._register_and_check_atleast_one_model_is_ready(models)


def grpc_server(model_server, port: int, args_dict: dict, max_threads: int):
    """KServe's gRPC server for ``model_server``, started (returns its serve coroutine)."""
    from kserve.protocol.grpc.server import GRPCServer

    grpc = GRPCServer(
        port, model_server.dataplane, model_server.model_repository_extension, kwargs=args_dict
    )
    return grpc.start(max_threads)

"""Command line of the model server: KServe's ``ModelServer`` with :class:`FashionMnistModel`.

    python -m serving.server --model_name fashion-mnist \\
        --model_base_path work/models/fashion-mnist/1 --http_port 8080

Endpoints (from KServe): ``GET /`` (liveness), ``GET /v1/models/<name>`` (readiness),
``POST /v1/models/<name>:predict`` (V1 protocol), ``GET /metrics`` (Prometheus).

The options are KServe's own (``kserve.model_server.parser`` is the parent parser: ``--http_port``,
``--workers``, ``--enable_grpc``, ...) plus ``--model_base_path``, the request limits, the
micro-batcher settings and TensorFlow's thread pools. Only single-process serving is supported
(``--workers 1``): scale out with replicas, as KServe does.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from http import HTTPStatus

from fmnist_common.cli import number
from serving import DEFAULT_MODEL_NAME, kserve_compat

log = logging.getLogger(__name__)
# The headers that make a request a CloudEvent in binary mode (CloudEvents HTTP binding;
# cloudevents.sdk.converters.util.has_binary_headers), lower-case as ASGI gives them.
CLOUDEVENT_BINARY_HEADERS = (b"ce-specversion", b"ce-id", b"ce-source", b"ce-type")


def build_parser() -> argparse.ArgumentParser:
    """KServe's model-server parser plus this server's options (see module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m serving.server",
        description="Serve the highest Fashion-MNIST SavedModel version over KServe's V1 API.",
        parents=[kserve_compat.kserve_parser()],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--model_base_path",
        required=True,
        help="directory holding <integer version>/saved_model.pb; the highest version is served",
    )
    parser.add_argument(
        "--http_host",
        default="0.0.0.0",
        help="address to bind (127.0.0.1 for local-only runs)",
    )
    parser.add_argument(
        "--max_instances", type=number(int, 1), default=64, help="instances per request"
    )
    parser.add_argument(
        "--max_image_bytes", type=number(int, 1), default=1 << 20, help="bytes per encoded image"
    )
    parser.add_argument(
        "--max_image_pixels", type=number(int, 1), default=1 << 20, help="width x height per image"
    )
    parser.add_argument(
        "--max_batch_size",
        type=number(int, 1),
        default=32,
        help="images per micro-batched model call",
    )
    parser.add_argument(
        "--max_batch_latency_ms",
        type=number(float, 0, 10_000),
        default=0.0,
        help="extra wait to fill a micro-batch (0: batch whatever queued during the last call)",
    )
    parser.add_argument(
        "--tf_intra_op_threads",
        type=number(int, 0),
        default=1,
        help="TensorFlow intra-op threads (0: TF default); 1 is fastest for this small model, "
        "concurrency comes from micro-batching",
    )
    parser.add_argument(
        "--tf_inter_op_threads",
        type=number(int, 0),
        default=1,
        help="TensorFlow inter-op threads (0: TF default)",
    )
    parser.add_argument(
        "--access_log",
        default=False,
        type=_strtobool,
        help="log one line per HTTP request (uvicorn access log)",
    )
    parser.set_defaults(
        model_name=DEFAULT_MODEL_NAME,
        enable_grpc=False,
        enable_latency_logging=False,
    )
    return parser


def _strtobool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on", "y", "t"):
        return True
    if v in ("0", "false", "no", "off", "n", "f"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {value!r}")


def _json_error(status: HTTPStatus):
    from fastapi.responses import JSONResponse

    async def handler(request, exc):
        # One line, no traceback: a client error is not a server fault (KServe logs tracebacks).
        log.info("%d %s %s: %s", status, request.method, request.url.path, exc)
        return JSONResponse(status_code=status, content={"error": str(exc)})

    return handler


class BodyLimitMiddleware:
    """ASGI middleware in front of KServe's app, for what it would otherwise 5xx or buffer blindly.

    * 413 when the body exceeds ``max_body_bytes``: at once from ``Content-Length``, and for a
      chunked body (no ``Content-Length``) as soon as the bytes read pass the limit;
    * 415 for CloudEvents binary-mode requests (all of ``ce-specversion``, ``ce-id``,
      ``ce-source``, ``ce-type``: the CloudEvents SDK's ``has_binary_headers``, the test KServe's
      decoder applies): that decoder fails on them with a 500; this server speaks plain V1 JSON
      only. Other ``ce-*`` headers pass, like TF Serving, which ignores them: a client sets
      ``Ce-Id`` to name the events KServe's logger (the agent) sends for its request.
    """

    def __init__(self, app, max_body_bytes: int):
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def _reject(self, scope, receive, send, status: HTTPStatus, message: str) -> None:
        from fastapi.responses import JSONResponse

        await JSONResponse(status_code=status, content={"error": message})(scope, receive, send)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        too_big = (
            f"request body over {self.max_body_bytes} bytes (--max_instances x --max_image_bytes)"
        )
        if all(k in headers for k in CLOUDEVENT_BINARY_HEADERS):
            await self._reject(
                scope, receive, send, HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                "CloudEvents binary mode (ce-* headers) is not supported: send a V1 JSON body",
            )  # fmt: skip
            return
        length = headers.get(b"content-length")
        if length is not None:
            if length.isdigit() and int(length) > self.max_body_bytes:
                await self._reject(
                    scope, receive, send, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, too_big
                )
                return
            await self.app(scope, receive, send)
            return
        # Chunked (or no) body: read it here, bounded, then replay it to the app.
        chunks, total, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_body_bytes:
                await self._reject(
                    scope, receive, send, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, too_big
                )
                return
            chunks.append(body)
            more = message.get("more_body", False)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def max_body_bytes(limits) -> int:
    """Largest sensible body for ``limits``: every instance at the byte limit in base64, wrapped
    MIME-style (a JSON-escaped ``\\r\\n``, 4 characters, every 76), plus slack."""
    b64_chars = 4 * ((limits.max_image_bytes + 2) // 3)
    return limits.max_instances * (b64_chars + b64_chars // 19 + 64) + 4096


def install_error_handlers(app, limits) -> None:
    """Add this server's error handlers and the body-size middleware to a KServe FastAPI app.

    Call after KServe's own handlers: ``InvalidInput`` -> 400 (as KServe, minus the traceback
    in the log), ``PayloadTooLarge`` -> 413, ``UnsupportedMediaType`` -> 415 (Starlette picks
    the handler of the most derived exception class).
    """
    from kserve.errors import InvalidInput

    from serving.request import PayloadTooLarge, UnsupportedMediaType

    app.add_exception_handler(InvalidInput, _json_error(HTTPStatus.BAD_REQUEST))
    app.add_exception_handler(PayloadTooLarge, _json_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE))
    app.add_exception_handler(UnsupportedMediaType, _json_error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE))
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=max_body_bytes(limits))


def make_rest_server(model_server, model, http_port: int, host: str = "0.0.0.0", **kwargs):
    """KServe ``RESTServer`` for ``model_server`` with this server's error handling.

    Args:
        model_server: a ``kserve.ModelServer`` with ``model`` registered.
        model: the :class:`serving.model.FashionMnistModel` (its limits size the body limit).
        http_port: TCP port.
        host: bind address.
        kwargs: passed on to ``RESTServer`` (``access_log_format``, ``event_loop``, ...).
    """
    return kserve_compat.make_rest_server(
        model_server, model.limits, install_error_handlers, http_port, host, **kwargs
    )


def build_app(model):
    """A fresh FastAPI app with KServe's routes, middlewares and handlers serving ``model``.

    The same wiring as ``python -m serving.server`` but on a new app object rather than KServe's
    module-level one, for ``fastapi.testclient.TestClient``.

    Args:
        model: a loaded (``ready``) :class:`serving.model.FashionMnistModel`.
    """
    from kserve import ModelServer

    server = ModelServer(http_port=0, enable_grpc=False, enable_latency_logging=False)
    server.register_model(model)
    return make_rest_server(server, model, 0).build_app()


def make_model(args: argparse.Namespace):
    """Build and load the model described by parsed ``args`` (see :func:`build_parser`).

    Raises:
        serving.model.ModelVersionNotFoundError: no published version.
    """
    from serving.model import FashionMnistModel, configure_tf_threads
    from serving.request import Limits

    configure_tf_threads(args.tf_intra_op_threads, args.tf_inter_op_threads)
    model = FashionMnistModel(
        name=args.model_name,
        model_base_path=args.model_base_path,
        limits=Limits(args.max_instances, args.max_image_bytes, args.max_image_pixels),
        max_batch_size=args.max_batch_size,
        max_batch_latency_ms=args.max_batch_latency_ms,
    )
    model.load()
    return model


def main(args: argparse.Namespace) -> int:
    """Load the model and serve until SIGINT/SIGTERM; returns the exit code.

    Returns 2 (after logging why) when there is no version to serve or ``--workers`` > 1.
    """
    from kserve import ModelServer

    from serving.versions import ModelVersionNotFoundError

    if args.workers != 1:
        log.error("--workers %d: only 1 is supported; scale out with replicas", args.workers)
        return 2
    try:
        model = make_model(args)
    except ModelVersionNotFoundError as exc:
        log.error("%s", exc)
        return 2
    log.info(
        "serving %s version %d on %s:%d", model.name, model.version, args.http_host, args.http_port
    )
    server = ModelServer(
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        workers=1,
        max_threads=args.max_threads,
        max_asyncio_workers=args.max_asyncio_workers,
        enable_grpc=args.enable_grpc,
        enable_docs_url=args.enable_docs_url,
        enable_latency_logging=args.enable_latency_logging,
        access_log_format=args.access_log_format,
        event_loop=args.event_loop,
        timeout_keep_alive=args.timeout_keep_alive,
    )
    # ModelServer.start() with a configurable bind address: its RESTServer always binds 0.0.0.0.
    kserve_compat.register_ready_models(server, [model])
    rest = make_rest_server(
        server,
        model,
        args.http_port,
        host=args.http_host,
        access_log_format=args.access_log_format,
        event_loop=args.event_loop,
        timeout_keep_alive=args.timeout_keep_alive,
    )
    if not args.access_log:  # uvicorn skips formatting when the logger has no handlers
        access = logging.getLogger("uvicorn.access")
        access.handlers, access.propagate = [], False
    if not args.enable_latency_logging:  # KServe's per-request timing lines
        logging.getLogger("kserve.trace").setLevel(logging.WARNING)
    servers = [rest.start()]
    if args.enable_grpc:
        servers.append(
            kserve_compat.grpc_server(server, args.grpc_port, vars(args), args.max_threads)
        )

    async def serve():
        server.setup_event_loop()
        await asyncio.gather(*servers)

    try:
        asyncio.run(serve())  # uvicorn handles SIGINT/SIGTERM (graceful shutdown)
    finally:
        model.stop()
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``fmnist-serve``)."""
    args = build_parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return main(args)


if __name__ == "__main__":
    sys.exit(cli())

"""``elmo serve`` on Ray Serve: the same FastAPI app, one copy per replica, so that scaling out
over cores and machines is Ray's job.

Each replica loads the model, warms it and batches the requests Ray routes to it, exactly as
``elmo serve`` does in one process (:func:`elmo.serve.app.load_app`); the endpoints, limits,
metrics and answers are the same. From Python::

    from ray import serve
    from elmo.integrations.ray_serve import elmo_deployment

    app = elmo_deployment(model="default", max_wait_ms=2).options(
        num_replicas=2, ray_actor_options={"num_cpus": 2}).bind()
    serve.run(app, route_prefix="/")          # http://127.0.0.1:8000/v1/embeddings, ...

or from the shell, with :func:`app_builder` (arguments as ``key=value``)::

    serve run elmo.integrations.ray_serve:app_builder model=default num_replicas=2 num_cpus=2

Needs ``pip install "elmo-embeddings[ray,serve]"``.
"""

from __future__ import annotations

import os
from typing import Any

# The app's options a deployment passes on to elmo.serve.app.load_app, and their types (for
# app_builder's "key=value" strings).
APP_OPTIONS: dict[str, type] = {
    "model": str, "device": str, "precision": str, "state": str, "threads": int, "cache_dir": str,
    "model_name": str, "max_batch_tokens": int, "max_wait_ms": float, "access_log": bool,
    "max_input_tokens": int, "max_inputs": int, "max_request_tokens": int, "max_body_bytes": int,
    "max_concurrent_requests": int, "max_queued_tokens": int, "request_timeout": float, "api_key": str,
    "embed_all_layers": str,
}
LIMIT_OPTIONS = ("max_input_tokens", "max_inputs", "max_request_tokens", "max_body_bytes")


def elmo_deployment(model: str | os.PathLike | None = None, *, name: str = "elmo", **options: Any):
    """A Ray Serve deployment (call ``.options(...)`` then ``.bind()``) whose replicas each serve
    :func:`elmo.serve.app.load_app`'s app for ``model`` (None: the packaged model). ``options``:
    those of :data:`APP_OPTIONS` (``device``, ``precision``, ``state``, ``threads``, batching and
    limits; ``model_name``, ``elmo serve --served-model-name``, default ``"elmo"``)."""
    from ray import serve

    unknown = sorted(set(options) - set(APP_OPTIONS))
    if unknown:
        raise ValueError(f"elmo_deployment: unknown option(s) {', '.join(unknown)}; expected "
                         f"{', '.join(sorted(APP_OPTIONS))}")
    model = None if model is None else os.fspath(model)

    def build():
        # Runs on each replica, which loads its own model: nothing big travels through Ray.
        from elmo.serve.app import load_app
        from elmo.serve.protocol import Limits

        kwargs = dict(options)
        limits = {k: kwargs.pop(k) for k in LIMIT_OPTIONS if k in kwargs}
        if limits:
            kwargs["limits"] = Limits(**limits)
        return load_app(model, **kwargs)

    return serve.deployment(serve.ingress(build)(), name=name)


def app_builder(args: dict[str, str]):
    """For ``serve run elmo.integrations.ray_serve:app_builder key=value ...``: the app options
    of :data:`APP_OPTIONS`, plus ``num_replicas`` and ``num_cpus`` (per replica)."""
    args = dict(args)
    deployment_options: dict[str, Any] = {}
    if "num_replicas" in args:
        deployment_options["num_replicas"] = int(args.pop("num_replicas"))
    if "num_cpus" in args:
        deployment_options["ray_actor_options"] = {"num_cpus": float(args.pop("num_cpus"))}
    options = {}
    for key, text in args.items():
        kind = APP_OPTIONS.get(key)
        if kind is None:
            raise ValueError(f"{key}: unknown argument; expected num_replicas, num_cpus or "
                             f"{', '.join(sorted(APP_OPTIONS))}")
        try:
            options[key] = text.lower() in ("1", "true", "yes") if kind is bool else kind(text)
        except ValueError:
            raise ValueError(f"{key}: expected {kind.__name__}, got {text!r}") from None
    model = options.pop("model", None)
    return elmo_deployment(model, **options).options(**deployment_options).bind()


__all__ = ["APP_OPTIONS", "app_builder", "elmo_deployment"]

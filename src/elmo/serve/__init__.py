"""ELMo as a service: ``elmo serve``, an HTTP server that batches the sentences of concurrent
callers (:mod:`elmo.serve.batching`), speaks text-embeddings-inference's and OpenAI's embedding
APIs (:mod:`elmo.serve.protocol`), and is a FastAPI app (:mod:`elmo.serve.app`, which needs the
``[serve]`` extra) that uvicorn or Ray Serve (:mod:`elmo.integrations.ray_serve`) runs.
See ``docs/serving.md``."""

"""Embedders that fail on purpose, for ``tests/test_serve.py``: built inside a worker process of
``elmo serve`` through :attr:`elmo.serve.worker.WorkerSpec.factory`, so that the failures happen
where they would in a real server. A batch holding the token ``POISON`` raises; one holding
``CRASH`` kills its process (SIGKILL, as the kernel's out-of-memory killer would). With
``ELMO_TEST_REFUSE_START`` set in the server's environment, a worker refuses to start."""

import os
import signal

from elmo.serve.worker import serving_embedder_of


def fragile_embedder(spec):
    if os.environ.get("ELMO_TEST_REFUSE_START"):
        raise RuntimeError("this worker refuses to start (ELMO_TEST_REFUSE_START)")
    embedder = serving_embedder_of(spec)
    real = embedder.embed_sentences

    def fragile(sentences, *args, **kwargs):
        if any("CRASH" in s for s in sentences):
            os.kill(os.getpid(), signal.SIGKILL)
        if any("POISON" in s for s in sentences):
            raise RuntimeError("the model broke on POISON")
        return real(sentences, *args, **kwargs)

    embedder.embed_sentences = fragile  # on this instance only, which this function made
    return embedder


def overflowing_embedder(spec):
    """The served model, whose runs give NaN vectors to the row of any sentence holding the token
    ``OVERFLOW`` (as weights that overflow float32 on an input would): what the embedder's own
    finite-output guard then finds, in the worker's process."""
    from elmo.inference.runtime import Runtime

    real = Runtime.run_batch

    def run_batch(self, rows, *args, **kwargs):
        out = real(self, rows, *args, **kwargs)
        for i, row in enumerate(rows):
            if "OVERFLOW" in row:
                out.layers[i, :, 0] = float("nan")
        return out

    Runtime.run_batch = run_batch  # this worker process is the test's own
    return serving_embedder_of(spec)

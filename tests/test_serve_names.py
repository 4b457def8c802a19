"""The served model's name: ``elmo`` unless ``--served-model-name`` (``model_name=``) says
otherwise, whatever ``--model`` is; reported by ``/info``, ``/v1/models``, ``/v1/models/{name}``
and every OpenAI answer, so that clients which look the model up first (the openai client's
``models.retrieve``, frameworks built on it) find the name they send. Real loopback servers, as
in tests/test_serve.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import FIXTURE_MODEL_ARGS, load_fixture_model

pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the [serve] extra is not installed: pip install -e '.[serve]'")
httpx = pytest.importorskip("httpx", reason="httpx (the test extra) is not installed")
openai = pytest.importorskip("openai", reason="the openai client (test extra) is not installed")

from test_serve import serving  # noqa: E402

from elmo import Embedder  # noqa: E402
from elmo.cli.main import main  # noqa: E402
from elmo.serve.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def embedder():
    return Embedder(load_fixture_model("allennlp"))


def test_the_default_name_is_elmo(embedder):
    with serving(create_app(embedder, access_log=False)) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        assert client.models.retrieve("elmo").id == "elmo"
        assert [m.id for m in client.models.list().data] == ["elmo"]
        answer = client.embeddings.create(model="elmo", input=["The bank raised rates ."], encoding_format="float")
        assert answer.model == "elmo"
        want = embedder.embed_sentence("The bank raised rates .", layers="average").mean(axis=0)
        assert np.array_equal(np.asarray(answer.data[0].embedding, dtype=np.float32), want)
        assert httpx.get(base + "/info").json()["model"] == "elmo"
        with pytest.raises(openai.NotFoundError, match="this server serves 'elmo'"):
            client.models.retrieve("default")


def test_a_name_with_a_slash_is_retrieved(embedder):
    """vLLM-style names (``org/model``) travel in the path of /v1/models/{name}."""
    with serving(create_app(embedder, model_name="ltg/elmo-nb", access_log=False)) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        assert client.models.retrieve("ltg/elmo-nb").id == "ltg/elmo-nb"
        assert client.embeddings.create(model="ltg/elmo-nb", input="a b").model == "ltg/elmo-nb"


@pytest.mark.parametrize("name", ["", " elmo", "el\nmo"])
def test_a_bad_name_is_refused(embedder, name, capsys):
    with pytest.raises(ValueError, match="model_name: "):
        create_app(embedder, model_name=name)
    assert main(["serve", *FIXTURE_MODEL_ARGS, "--served-model-name", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith("elmo serve: error: --served-model-name: ") and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # a real elmo serve process: CI's slow pass
def test_the_command_serves_the_name_it_is_given():
    """A real ``elmo serve --served-model-name``: the openai client retrieves the model by that
    name, and the ready line says it."""
    process = subprocess.Popen([sys.executable, "-m", "elmo.cli.main", "serve", *FIXTURE_MODEL_ARGS, "--port", "0",
                                "--served-model-name", "elmo-tiny", "--no-access-log"],
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        lines = []
        for line in process.stderr:
            lines.append(line)
            if "ready on" in line:
                break
        ready = "".join(lines)
        assert "model name 'elmo-tiny'" in ready, ready
        base = re.search(r"ready on (http://\S+)", ready).group(1)
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        assert client.models.retrieve("elmo-tiny").id == "elmo-tiny"
        assert client.embeddings.create(model="elmo-tiny", input="a b").model == "elmo-tiny"
        assert httpx.get(base + "/info").json()["model"] == "elmo-tiny"
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == -signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

"""``hf://OWNER/NAME[@REVISION][/SUBFOLDER]``: models on the Hugging Face Hub, read offline from a
Hub cache each test lays out (``HF_HUB_OFFLINE=1``, ``HF_HUB_CACHE`` in a temporary folder).

``huggingface_hub`` reads those variables when it is imported, so the checks run in a fresh
interpreter."""

import dataclasses
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from conftest import ALLENNLP

from elmo.hub import locate
from elmo.hub.hf import HubId, parse_hub_id

ROOT = Path(__file__).resolve().parent.parent
OPTIONS, WEIGHTS = ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"
MAIN = "a" * 40  # the commit refs/main points at
TAGGED = "b" * 40  # the commit refs/v1 points at


def lay_out_hub_cache(cache: Path) -> None:
    """The Hub cache's layout (``models--OWNER--NAME/refs/<ref>`` holding a commit hash,
    ``snapshots/<commit>/<files>``) for ``acme/elmo-tiny``: at ``main`` options.json +
    weights.hdf5; at ``v1`` an NLPL-style zip, and AllenNLP-named files in a subfolder."""
    repo = cache / "models--acme--elmo-tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(MAIN)
    (repo / "refs" / "v1").write_text(TAGGED)
    main = repo / "snapshots" / MAIN
    main.mkdir(parents=True)
    (main / "options.json").write_bytes(OPTIONS.read_bytes())
    (main / "weights.hdf5").write_bytes(WEIGHTS.read_bytes())
    (main / "README.md").write_text("---\nlibrary_name: elmo\n---\n")
    tagged = repo / "snapshots" / TAGGED
    (tagged / "allennlp").mkdir(parents=True)
    with zipfile.ZipFile(tagged / "209.zip", "w") as z:
        z.write(OPTIONS, "options.json")
        z.write(WEIGHTS, "model.hdf5")
        z.writestr("meta.json", '{"id": 209}')
    (tagged / "allennlp" / "elmo_tiny_options.json").write_bytes(OPTIONS.read_bytes())
    (tagged / "allennlp" / "elmo_tiny_weights.hdf5").write_bytes(WEIGHTS.read_bytes())


def run_offline(tmp_path: Path, script: str) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"), ELMO_CACHE=str(tmp_path / "elmo"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "tests"), env.get("PYTHONPATH", "")) if p)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                            cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_hub_ids_load_every_layout_offline_from_the_hub_cache(tmp_path):
    lay_out_hub_cache(tmp_path / "hub")
    out = run_offline(tmp_path, f"""
        import torch
        from conftest import ALLENNLP
        from elmo import Embedder
        from elmo.allennlp import Elmo, ElmoEmbedder, batch_to_ids
        from elmo.hub import load_model
        from elmo.hub.download import DownloadError

        reference = load_model((ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"))
        def same(model):
            return all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                         reference.state_dict().values()))

        for source in ("hf://acme/elmo-tiny", "hf://acme/elmo-tiny@main", "hf://acme/elmo-tiny@{MAIN}",
                       "hf://acme/elmo-tiny@v1", "hf://acme/elmo-tiny@{TAGGED}/allennlp",
                       "hf://acme/elmo-tiny@v1/allennlp/"):
            assert same(load_model(source, progress=False)), source
        sentences = [["Hub", "models", "."], ["Yes"]]
        want = Embedder(reference, state="reset").embed_sentences(sentences)
        got = Embedder.from_pretrained("hf://acme/elmo-tiny@v1", state="reset", progress=False)
        assert all((a == b).all() for a, b in zip(got.embed_sentences(sentences), want))
        elmo = Elmo("hf://acme/elmo-tiny", None, 1, dropout=0.0, state="reset")
        local = Elmo(str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5"), 1, dropout=0.0,
                     state="reset")
        ids = batch_to_ids(sentences)
        assert torch.equal(elmo(ids)["elmo_representations"][0], local(ids)["elmo_representations"][0])
        assert ElmoEmbedder("hf://acme/elmo-tiny@v1", None).embed_sentence(["Yes"]).shape == (3, 1, 32)

        for bad in ("hf://acme/absent", "hf://acme/elmo-tiny@v2"):
            try:
                load_model(bad, progress=False)
            except DownloadError as e:
                assert str(e).startswith(bad + ": could not get it from the Hugging Face Hub (") and "\\n" not in str(e), e
            else:
                raise AssertionError(bad)
        try:
            load_model("hf://acme/elmo-tiny@v1/missing", progress=False)
        except DownloadError as e:  # offline, the subfolder is not in the snapshot
            raise AssertionError(e)
        except ValueError as e:
            assert "has no folder 'missing'" in str(e), e
        print("ok")
    """)
    assert out.strip() == "ok"


def test_hub_ids_are_parsed_and_checked_without_the_network():
    assert parse_hub_id("hf://acme/elmo-tiny") == HubId("acme/elmo-tiny")
    assert parse_hub_id("hf://acme/elmo.v2@main/models/en") == HubId("acme/elmo.v2", "main", "models/en")
    assert locate("hf://acme/elmo-tiny@v1").kind == "hub"
    for bad in ("hf://acme", "hf://acme/x/../y", "hf:///x/y", "hf://acme/x@"):
        with pytest.raises(ValueError, match=r"not a Hugging Face Hub id; expected hf://OWNER/NAME\[@REVISION\]"):
            locate(bad)


def test_without_huggingface_hub_one_line_says_to_install_the_extra(monkeypatch, capsys, tmp_path):
    from elmo.hub import load_model

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if it were not installed
    with pytest.raises(ImportError) as info:
        load_model("hf://acme/elmo-tiny")
    assert str(info.value) == ("hf://acme/elmo-tiny: models on the Hugging Face Hub need huggingface_hub: "
                               "pip install 'elmo-embeddings[hub]'")
    # The command line: the same line, exit status 2, no traceback.
    from elmo.cli.main import main

    (tmp_path / "in.txt").write_text("a b\n")
    assert main(["embed", "--model", "hf://acme/elmo-tiny", str(tmp_path / "in.txt")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'elmo-embeddings[hub]'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_what_a_run_saves_names_the_hub_model_pinned_to_its_commit(tmp_path):
    """An embedding file, a task run's config and checkpoint, and a model's origin record a Hub
    model as ``hf://OWNER/NAME@<commit>``, the commit its branch or tag resolved to, which names
    the same files whatever the branch holds later."""
    lay_out_hub_cache(tmp_path / "hub")
    out = run_offline(tmp_path, f"""
        import json
        from pathlib import Path
        from elmo import Embedder
        from elmo.cli.main import main
        from elmo.hub import load_model_with_origin, locate
        from elmo.inference.outputs import file_info
        from elmo.tasks.config import load_task_config
        from elmo.tasks.training import evaluate_task, read_task_checkpoint, train_task
        from test_task_training import write_config, write_ner

        for source, pinned in (("hf://acme/elmo-tiny", "hf://acme/elmo-tiny@{MAIN}"),
                               ("hf://acme/elmo-tiny@main", "hf://acme/elmo-tiny@{MAIN}"),
                               ("hf://acme/elmo-tiny@v1", "hf://acme/elmo-tiny@{TAGGED}"),
                               ("hf://acme/elmo-tiny@v1/allennlp/", "hf://acme/elmo-tiny@{TAGGED}/allennlp")):
            model, origin = load_model_with_origin(source, progress=False)
            assert origin["source"] == pinned and "published" not in origin, (source, origin)
            assert locate(pinned).kind == "hub"
        assert load_model_with_origin("default")[1]["source"] == "default"

        Path("in.txt").write_text("Hub models .\\nYes\\n")
        Embedder.from_pretrained("hf://acme/elmo-tiny@v1", state="reset", progress=False).embed_file(
            "in.txt", "api.hdf5", progress=False)
        assert file_info("api.hdf5")["model_source"] == "hf://acme/elmo-tiny@{TAGGED}"
        assert main(["embed", "in.txt", "cli.hdf5", "--model", "hf://acme/elmo-tiny", "--no-progress",
                     "--state", "reset"]) == 0
        assert file_info("cli.hdf5")["model_source"] == "hf://acme/elmo-tiny@{MAIN}"

        write_ner(Path("train.txt"), 16, 1)
        toml = ['task = "tagging"', 'metric = "span_f1"', 'output = "run"', 'cache_dir = "layers"',
                '[data]', 'kind = "conll2003"', 'train = "train.txt"', 'dev = "train.txt"',
                '[model]', 'hidden = 8', 'char_filters = 4', '[bilm]', 'model = "hf://acme/elmo-tiny"',
                '[train]', 'epochs = 1']
        config = load_task_config(write_config(Path("ner.toml"), "\\n".join(toml)))
        train_task(config, progress=False)
        assert json.loads(Path("run/config.json").read_text())["bilm"]["model"] == "hf://acme/elmo-tiny@{MAIN}"
        assert read_task_checkpoint("run/best.pt")["config"]["bilm"]["model"] == "hf://acme/elmo-tiny@{MAIN}"
        assert evaluate_task("run", "train.txt", progress=False)["examples"] == 16
        print("ok")
    """)
    assert out.strip() == "ok"


def test_a_hub_copy_counts_as_a_published_model_only_where_it_matches_the_pins(tmp_path, monkeypatch):
    from elmo.hub import pretrained
    from elmo.hub.download import file_sha256

    # Pinned as if "small" were these files: then both files must match (size and SHA-256).
    sizes, hashes = (OPTIONS.stat().st_size, WEIGHTS.stat().st_size), (file_sha256(OPTIONS), file_sha256(WEIGHTS))
    pinned = dataclasses.replace(pretrained.PUBLISHED["small"], options_size=sizes[0], options_sha256=hashes[0],
                                 weights_size=sizes[1], weights_sha256=hashes[1].upper())
    monkeypatch.setitem(pretrained.PUBLISHED, "small", pinned)
    assert pretrained.published_match(OPTIONS, WEIGHTS) == "small"
    altered = tmp_path / "weights.hdf5"
    altered.write_bytes(WEIGHTS.read_bytes()[:-1] + bytes([WEIGHTS.read_bytes()[-1] ^ 1]))  # same size
    assert pretrained.published_match(OPTIONS, altered) is None
    # A size pin alone (as "original" has) is not enough to tell a copy from an altered file.
    monkeypatch.setitem(pretrained.PUBLISHED, "small", dataclasses.replace(pinned, weights_sha256=None))
    assert pretrained.published_match(OPTIONS, WEIGHTS) is None
    # The shipped pins: no published file has a SHA-256 pin yet, so no copy stands in for one.
    monkeypatch.undo()
    assert pretrained.published_match(OPTIONS, WEIGHTS) is None

    # Through the resolver: the origin names the published model only where the pins match.
    lay_out_hub_cache(tmp_path / "hub")
    out = run_offline(tmp_path, f"""
        import dataclasses
        from elmo.hub import load_model_with_origin, pretrained

        print(load_model_with_origin("hf://acme/elmo-tiny", progress=False)[1].get("published"))
        spec = pretrained.PUBLISHED["small"]
        pretrained.PUBLISHED["small"] = dataclasses.replace(spec, options_sha256="{hashes[0]}",
                                                            weights_sha256="{hashes[1]}")
        origin = load_model_with_origin("hf://acme/elmo-tiny", progress=False)[1]
        print(origin["published"], origin["source"])
    """)
    assert out.split("\n")[:2] == ["None", f"small hf://acme/elmo-tiny@{MAIN}"]


def test_a_repository_of_models_in_subfolders_names_them_to_choose_from(tmp_path):
    from elmo.hub.hf import model_in

    snapshot = tmp_path / "snapshot"
    for language in ("en", "de"):
        (snapshot / language).mkdir(parents=True)
        (snapshot / language / "options.json").write_bytes(OPTIONS.read_bytes())
        (snapshot / language / "weights.hdf5").write_bytes(WEIGHTS.read_bytes())
    (snapshot / "notes").mkdir()  # a folder without a model is not offered
    (snapshot / "README.md").write_text("two models\n")
    with pytest.raises(ValueError) as error:
        model_in(snapshot, "hf://acme/elmo-multi@v1")
    message = str(error.value)
    assert message == ("hf://acme/elmo-multi@v1: no model at this level; it holds models in the folders de, en: "
                       "choose one (hf://acme/elmo-multi@v1/de, hf://acme/elmo-multi@v1/en)")
    assert model_in(snapshot / "en", "hf://acme/elmo-multi@v1/en") == snapshot / "en"
    # One level down, the id keeps its subfolder.
    (snapshot / "nested" / "small").mkdir(parents=True)
    (snapshot / "nested" / "small" / "model.zip").write_bytes(b"")
    with pytest.raises(ValueError, match=r"choose one \(hf://acme/elmo-multi/nested/small\)$"):
        model_in(snapshot / "nested", "hf://acme/elmo-multi/nested")
    # A folder of no model at all still lists its files.
    with pytest.raises(ValueError, match=r"\(it holds README.md\)$"):
        (snapshot / "en").rename(tmp_path / "en")
        (snapshot / "de").rename(tmp_path / "de")
        model_in(snapshot, "hf://acme/elmo-multi")

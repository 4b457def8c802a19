"""``elmo export --hub-card``: a folder ready to upload to the Hugging Face Hub, whose README.md
front matter is the Hub's metadata, and which loads back through ``hf://`` from a Hub cache laid
out offline the way the Hub's client lays out a download of it."""

import json
import shutil

import pytest
import torch
from test_hub_ids import MAIN, run_offline
from test_train import CORPUS, tiny_settings

from elmo.cli.main import main
from elmo.hub import load_language_model_with_origin
from elmo.hub.card import export_for_hub, heldout_perplexity
from elmo.hub.checkpoints import CARD_MARK
from elmo.training.train import Trainer


def front_matter(card: str) -> dict | list:
    """The card's YAML front matter, parsed: by PyYAML where installed, else strictly checked to be
    the small subset the card writes (keys, lists, JSON scalars) and only its top-level keys read."""
    assert card.startswith("---\n"), card[:40]
    head = card[4:card.index("\n---\n")]
    try:
        import yaml
    except ImportError:
        values = {}
        for line in head.splitlines():
            if line.startswith((" ", "-")):
                continue  # inside a list or mapping: only the top level is read here
            key, colon, value = line.partition(": ") if ": " in line else line.partition(":")
            assert colon and key.replace("_", "").replace("-", "").isalnum(), line
            values[key] = json.loads(value) if value.startswith('"') else value
        return values
    return yaml.safe_load(head)


@pytest.fixture(scope="module")
def heldout_run(tmp_path_factory):
    """A 10-step training run that logged held-out perplexity at steps 5 and 10."""
    run = tmp_path_factory.mktemp("run") / "run"
    Trainer(tiny_settings(run, max_tokens=4 * 10 * 10, heldout=[str(CORPUS)], eval_every=5, eval_targets=200)).run()
    return run


def test_the_hub_folder_has_the_hubs_metadata_and_loads_back_through_hf(heldout_run, tmp_path):
    out = tmp_path / "acme-elmo"
    card = export_for_hub(heldout_run, out, license="cc-by-sa-4.0", languages=["en", "nob"],
                          datasets=["wikitext"], command="elmo export run --output acme-elmo --hub-card")
    assert (out / "README.md").read_text(encoding="utf-8") == card and CARD_MARK in card
    meta = front_matter(card)
    perplexity, step = heldout_perplexity(heldout_run, 10)
    assert step == 10 and perplexity > 1
    assert meta["library_name"] == "elmo" and meta["license"] == "cc-by-sa-4.0"
    if isinstance(meta.get("model-index"), list):  # parsed by PyYAML
        assert {k: meta[k] for k in ("library_name", "license", "language", "datasets")} == {
            "library_name": "elmo", "license": "cc-by-sa-4.0", "language": ["en", "nob"], "datasets": ["wikitext"]}
        metric = meta["model-index"][0]["results"][0]["metrics"][0]
        assert metric["type"] == "perplexity" and metric["value"] == round(perplexity, 3)
        assert metric["name"] == "Held-out perplexity (step 10)"
    # The Hub's own client reads the same metadata, model-index included (offline: a parse only).
    hub_card = pytest.importorskip("huggingface_hub").ModelCard(card)
    assert hub_card.data.library_name == "elmo" and hub_card.data.eval_results[0].metric_value == round(perplexity, 3)
    # The body: the corpus and settings of the run, and the command that made the folder.
    assert str(CORPUS) in card and '"eval_every": 5' in card and "elmo export run --output acme-elmo" in card

    # Uploaded and downloaded again: the Hub cache holds the folder's files under a commit.
    snapshot = tmp_path / "hub" / "models--acme--elmo-export" / "snapshots" / MAIN
    shutil.copytree(out, snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(MAIN)
    got = run_offline(tmp_path, f"""
        import torch
        from elmo.hub import load_language_model_with_origin
        model, vocab, origin = load_language_model_with_origin("hf://acme/elmo-export", progress=False)
        torch.save({{"model": model.state_dict(), "vocab": vocab.words, "origin": origin}}, "loaded.pt")
    """)
    assert got == ""
    loaded = torch.load(tmp_path / "loaded.pt", weights_only=True)
    model, vocab, _ = load_language_model_with_origin(heldout_run)
    assert loaded["vocab"] == vocab.words and loaded["origin"]["source"] == f"hf://acme/elmo-export@{MAIN}"
    for name, value in model.state_dict().items():  # float32 weights stored as float32: exact
        assert torch.equal(loaded["model"][name], value), name


def test_held_out_perplexity_is_the_last_logged_at_or_before_the_step(tmp_path):
    (tmp_path / "metrics.csv").write_text(
        "step,heldout_perplexity\n5,90.5\n8,\n10,80.25\n12,nan\n15,70\n17,6")  # the last row cut short
    assert heldout_perplexity(tmp_path, 14) == (80.25, 10)
    assert heldout_perplexity(tmp_path, 16) == (70.0, 15)
    assert heldout_perplexity(tmp_path, 4) is None
    assert heldout_perplexity(tmp_path / "absent", 10) is None


def test_the_command_line_asks_for_a_license_and_never_replaces_a_readme_of_yours(tmp_path, capsys):
    out = tmp_path / "out"
    for argv, message in (
            (["--hub-card"], "--hub-card: give the model's license (--license"),
            (["--license", "mit"], "--license, --language, --dataset and --name go into the model card: add --hub-card"),
            (["--hub-card", "--license", "MIT License"], "license: 'MIT License' is not a Hub license id"),
            (["--hub-card", "--license", "mit", "--language", "English"], "language: 'English' is not a language code")):
        assert main(["export", "default", "--output", str(out), *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert not out.exists()
    assert main(["export", "default", "--output", str(out), "--hub-card", "--license", "mit", "--language", "en"]) == 0
    first = (out / "README.md").read_text(encoding="utf-8")
    assert front_matter(first)["license"] == "mit" and "model-index" not in front_matter(first)
    # elmo's own card is replaced with --force; once it is not (the mark removed), it is refused.
    assert main(["export", "default", "--output", str(out), "--force", "--hub-card", "--license", "apache-2.0"]) == 0
    assert "apache-2.0" in (out / "README.md").read_text(encoding="utf-8")
    (out / "README.md").write_text("# my own notes\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["export", "default", "--output", str(out), "--force"]) == 2
    assert "README.md" in capsys.readouterr().err
    assert (out / "README.md").read_text(encoding="utf-8") == "# my own notes\n"


def test_the_card_is_titled_with_the_models_name_not_the_local_folders(tmp_path, heldout_run, capsys):
    from elmo.hub.card import card_name

    out = tmp_path / "hubcard"
    assert main(["export", "default", "--output", str(out), "--hub-card", "--license", "mit",
                 "--name", "acme/elmo-news"]) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "\n# acme/elmo-news\n" in card and "hubcard" not in card.replace(str(out), "")
    # A repository id fills the examples, and the command that made the folder keeps --name.
    assert 'Embedder.from_pretrained("hf://acme/elmo-news")' in card and "--model hf://acme/elmo-news" in card
    assert "--name acme/elmo-news" in card and "OWNER/NAME" not in card
    # Any other title leaves the examples to the reader.
    other = export_for_hub("default", tmp_path / "other", license="mit", name="News ELMo (2026)")
    assert "\n# News ELMo (2026)\n" in other and "hf://OWNER/NAME" in other
    # Without --name: the Hub repository the model came from (not its pinned commit), or the run.
    assert card_name({"source": f"hf://acme/elmo-tiny@{MAIN}/en", "path": str(tmp_path)}) == "acme/elmo-tiny/en"
    _, _, origin = load_language_model_with_origin(heldout_run)
    assert card_name(origin) == heldout_run.name == "run"
    assert "\n# run\n" in export_for_hub(heldout_run, tmp_path / "from-run", license="mit")
    assert main(["export", "default", "--output", str(tmp_path / "x"), "--name", "a/b"]) == 2
    assert "--name go into the model card: add --hub-card" in capsys.readouterr().err

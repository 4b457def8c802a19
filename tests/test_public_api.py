"""The top-level package (src/elmo/__init__.py): it exports the public API only, every name in
``__all__`` is there, and the readers that left it for ``load_model`` still import, with a warning."""

import importlib

import pytest

import elmo


def test_all_names_the_public_api_and_nothing_is_missing():
    assert len(elmo.__all__) == len(set(elmo.__all__))
    for name in elmo.__all__:
        assert getattr(elmo, name) is not None, name
    assert {"Embedder", "FileEmbedder", "Elmo", "load_model", "open_embeddings"} <= set(elmo.__all__)
    assert not {"load_bilm_tf", "load_checkpoint"} & set(elmo.__all__)
    assert not {"load_bilm_tf", "load_checkpoint"} & set(dir(elmo))


@pytest.mark.parametrize("name, module", [("load_bilm_tf", "elmo.model.weights"),
                                          ("load_checkpoint", "elmo.hub.checkpoints")])
def test_a_reader_that_left_the_top_level_still_imports_with_a_warning(name, module):
    with pytest.warns(DeprecationWarning, match=f"import {name} from {module}"):
        found = getattr(elmo, name)
    assert found is getattr(importlib.import_module(module), name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'load_everything'"):
        elmo.load_everything  # noqa: B018

"""elmo's own reading of a pickle's imports (elmo.hub.pickles): from the opcodes, running nothing."""

import collections
import io
import pickle

import pytest
import torch
from conftest import ALLENNLP, FIXTURES

from elmo import save_checkpoint
from elmo.model.weights import load_bilm_tf
from elmo.hub.pickles import UnsafePickleError, check_pickle, pickle_globals, unsafe_global


def globals_of(data: bytes) -> list[str]:
    return list(pickle_globals(io.BytesIO(data)))


def test_every_way_a_pickle_names_a_global():
    # Written by hand, never by pickling a live object: GLOBAL (protocol 0), INST, and protocol
    # 4's STACK_GLOBAL on memoized strings; Python 2's module names as the unpickler maps them.
    assert globals_of(b"cos\nsystem\n(S'true'\ntR.") == ["os.system"]
    assert globals_of(b"(S'x'\nisubprocess\nPopen\n.") == ["subprocess.Popen"]
    assert globals_of(b"c__builtin__\neval\n(S'1'\ntR.") == ["builtins.eval"]
    stack_global = (b"\x80\x04\x8c\x08builtins\x94\x8c\x05print\x94\x93\x94"  # builtins.print, both memoized
                    b"h\x00h\x01\x93\x94.")                                  # and again from the memo
    assert globals_of(stack_global) == ["builtins.print", "builtins.print"]


def test_a_global_whose_name_is_not_spelled_out_is_refused():
    # STACK_GLOBAL on a value some other opcode built: no allow-list can hold what it names.
    computed = b"\x80\x04\x8c\x01a\x8c\x01b\x86\x94\x8c\x01c\x93."
    assert unsafe_global(computed) == "<a global whose name is computed>"
    assert unsafe_global(b"\x80\x02\x82\x01.") == "<copyreg extension code 1>"


def test_what_elmo_and_torch_write_passes(tmp_path):
    model = load_bilm_tf(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5")
    save_checkpoint(model, tmp_path / "model.pt")
    assert unsafe_global(tmp_path / "model.pt") is None
    for zip_format in (True, False):
        buffer = io.BytesIO()
        torch.save({"w": torch.nn.Parameter(torch.ones(2)), "h": torch.zeros(3, dtype=torch.float16),
                    "size": torch.Size([2]), "n": [1, 2.5, "x", None, (True,)]}, buffer,
                   _use_new_zipfile_serialization=zip_format)
        assert unsafe_global(buffer.getvalue()) is None
    for name in ("token_embedder.pkl", "encoder.pkl"):  # written by PyTorch 0.4's legacy format
        assert unsafe_global(FIXTURES / "manylangs" / "model" / name) is None


class _Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_the_first_unsafe_global_is_named_in_one_line(capsys):
    data = pickle.dumps([collections.OrderedDict(a=1), _Evil(), eval], protocol=2)  # allowed, then two not
    with pytest.raises(UnsafePickleError) as caught:
        check_pickle(data, "x.pkl")
    assert str(caught.value).startswith("x.pkl: holds Python objects that elmo never runs (its pickle imports "
                                        "builtins.print)")
    assert capsys.readouterr().out == ""  # nothing ran


@pytest.mark.parametrize("data", [b"", b"\x00\x01 not a pickle", b"PK\x03\x04 a broken zip", b"\x80\x02(K\x01"])
def test_bytes_that_are_not_a_pickle_are_left_to_torch_to_call_damaged(data):
    assert unsafe_global(data) is None


@pytest.mark.parametrize("opcode", [b"\x8e", b"\x8d", b"\x8a"])  # BINBYTES8, BINUNICODE8 (2**40), LONG4 (2**31-1)
def test_a_length_past_the_end_of_the_file_is_damage_not_an_allocation(tmp_path, opcode):
    """A 14-byte legacy .pt whose pickle claims 2**40 bytes gave MemoryError in this scanner;
    every length it reads is now bounded by what is left of the file."""
    length = (2**40).to_bytes(8, "little") if opcode != b"\x8a" else (2**31 - 1).to_bytes(4, "little")
    data = (b"\x80\x04" + opcode + length + b"abc")[:14]
    path = tmp_path / "claim.pt"
    path.write_bytes(data)
    assert unsafe_global(path) is None and unsafe_global(data) is None  # damaged: left to torch.load to say so


def test_a_text_line_without_end_is_read_only_to_its_bound(tmp_path):
    path = tmp_path / "line.pt"
    path.write_bytes(b"c" + b"m" * (1 << 20))  # GLOBAL with a module name of a megabyte and no newline
    assert unsafe_global(path) is None


def test_the_file_claiming_a_terabyte_is_one_line_of_damage(tmp_path):
    from elmo.hub.checkpoints import read_checkpoint
    path = tmp_path / "claim.pt"
    path.write_bytes(b"\x80\x04\x8e" + (2**40).to_bytes(8, "little") + b"abc")
    with pytest.raises(ValueError) as caught:
        read_checkpoint(path, {"elmo-model": 1})
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)

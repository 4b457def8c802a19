"""File helpers (elmo.fileio): reading (damaged .gz included), output files, and the folders elmo
makes (created with a marker; replaced or deleted only when elmo can show it made them)."""

import gzip
import os
import re

import pytest
from conftest import damaged_gzips

from elmo.fileio import (
    OWNER_FILE,
    ForeignFolderError,
    atomic_folder,
    check_folder,
    check_output_file,
    claim_folder,
    count_lines,
    make_owned_folder,
    open_text,
    owner_id,
    read_lines,
    read_owner,
    remove_owned_folder,
)


def test_count_lines_only_where_a_second_read_is_possible(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one\ntwo\nthree")
    assert count_lines(tmp_path / "a.txt") == 3 == len(list(read_lines(tmp_path / "a.txt")))
    with gzip.open(tmp_path / "b.txt.gz", "wb") as f:
        f.write(b"x\n" * 5)
    assert count_lines(tmp_path / "b.txt.gz") == 5
    (tmp_path / "empty.txt").write_bytes(b"")
    assert count_lines(tmp_path / "empty.txt") == 0
    os.mkfifo(tmp_path / "fifo")
    assert count_lines(tmp_path / "fifo") is None and count_lines("-") is None


# ------------------------------------------------------------------------- damaged .gz inputs
def test_damaged_gzip_is_one_error_naming_the_file_line_and_byte(tmp_path):
    for kind, path in damaged_gzips(tmp_path).items():
        with pytest.raises(ValueError) as lines:
            list(read_lines(path))
        with pytest.raises(ValueError) as whole:
            with open_text(path) as f:
                f.read()
        for message in (str(lines.value), str(whole.value)):
            assert message.startswith(f"{path}: not readable as gzip (") and "read up to byte" in message, kind
            assert "\n" not in message and "truncated or corrupt" in message, kind
        if kind == "truncated":  # the lines before the damage were read, and the message says how many
            assert re.search(r"after line [\d,]+, read up to byte [\d,]+ of [\d,]+: Compressed file ended",
                             str(lines.value)), lines.value
        assert count_lines(path) is None  # the counting pass leaves the error to the reading pass


# ------------------------------------------------------------------------- folders elmo makes
def test_an_owned_folder_appears_with_its_marker_and_a_random_id(tmp_path):
    first, second = make_owned_folder(tmp_path / "a", "model folder"), make_owned_folder(tmp_path / "b", "model folder")
    assert first != second and len(first) == 32
    assert read_owner(tmp_path / "a") == {"format": "elmo-owner", "kind": "model folder", "id": first}
    assert os.listdir(tmp_path / "a") == [OWNER_FILE]
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]  # nothing left beside them
    (tmp_path / "empty").mkdir()
    make_owned_folder(tmp_path / "empty", "model folder")  # an empty folder: nothing to lose
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    with pytest.raises(ForeignFolderError, match="user: already exists, and elmo did not make it"):
        make_owned_folder(tmp_path / "user", "model folder")
    assert os.listdir(tmp_path / "user") == ["notes.txt"]
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "empty", "user"]


def test_check_folder_accepts_only_what_elmo_can_show_it_made(tmp_path):
    assert check_folder(tmp_path / "missing", "training run") is False
    (tmp_path / "empty").mkdir()
    assert check_folder(tmp_path / "empty", "training run") is False
    make_owned_folder(tmp_path / "run", "training run")
    assert check_folder(tmp_path / "run", "training run") is True
    with pytest.raises(ForeignFolderError, match="run: an elmo training run, not a model folder; choose another --out"):
        check_folder(tmp_path / "run", "model folder", option="--output")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ForeignFolderError, match="file: a file is in the way"):
        check_folder(tmp_path / "file", "training run")
    # A user's folder of names elmo also writes is still the user's.
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "options.json").write_text("{}")
    (tmp_path / "user" / "metrics.csv").write_text("a,b\n")
    with pytest.raises(ForeignFolderError) as error:
        check_folder(tmp_path / "user", "training run", option="--output")
    assert str(error.value) == (f"{tmp_path / 'user'}: a folder elmo did not make (it holds metrics.csv, options.json "
                                f"and no {OWNER_FILE} of elmo's) is in the way of the training run; elmo writes only "
                                "into a new or empty folder or one it made: choose another --output, or move it away")
    # ... unless the caller recognises it as one elmo made before the marker existed.
    assert check_folder(tmp_path / "user", "training run", recognise=lambda p: True) is True
    # A foreign marker is no marker.
    (tmp_path / "forged").mkdir()
    (tmp_path / "forged" / OWNER_FILE).write_text("not json")
    with pytest.raises(ForeignFolderError, match="a folder elmo did not make"):
        check_folder(tmp_path / "forged", "training run")
    # Replaced or deleted whole: one of ours holding anything else is refused too.
    (tmp_path / "run" / "notes.txt").write_text("mine")
    assert check_folder(tmp_path / "run", "training run") is True  # written into: its files only
    with pytest.raises(ForeignFolderError, match=r"run: holds notes.txt, which elmo did not write there"):
        check_folder(tmp_path / "run", "training run", allowed={"options.json"}.__contains__)


def test_claim_folder_creates_adopts_or_refuses(tmp_path):
    created = claim_folder(tmp_path / "deep" / "run", "task run", make_parents=True)
    assert read_owner(tmp_path / "deep" / "run")["id"] == created
    assert claim_folder(tmp_path / "deep" / "run", "task run") == created  # the same folder, the same id
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text("{}")
    adopted = claim_folder(tmp_path / "old", "task run", recognise=lambda p: True)
    assert read_owner(tmp_path / "old") == {"format": "elmo-owner", "kind": "task run", "id": adopted}
    with pytest.raises(FileNotFoundError):
        claim_folder(tmp_path / "no" / "parent", "task run")
    assert not (tmp_path / "no").exists()


def test_atomic_folder_replaces_only_a_folder_elmo_made_holding_nothing_else(tmp_path):
    allowed = {"a.txt"}.__contains__

    def write(text):
        return lambda folder: (folder / "a.txt").write_text(text)

    out = tmp_path / "out"
    atomic_folder(out, write("one"), allowed=allowed)
    assert sorted(os.listdir(out)) == [OWNER_FILE, "a.txt"]
    first_id = read_owner(out)["id"]
    with pytest.raises(FileExistsError, match="already exists; pass --force"):
        atomic_folder(out, write("two"), allowed=allowed)
    atomic_folder(out, write("two"), overwrite=True, allowed=allowed)
    assert (out / "a.txt").read_text() == "two" and read_owner(out)["id"] != first_id
    # A user's file inside: never replaced, even with overwrite; the folder stays as it was.
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(ForeignFolderError, match="holds mine.txt, which elmo did not write there"):
        atomic_folder(out, write("three"), overwrite=True, allowed=allowed)
    assert (out / "mine.txt").read_text() == "keep me" and (out / "a.txt").read_text() == "two"
    # A folder without the marker: refused unless recognised.
    user = tmp_path / "user"
    user.mkdir()
    (user / "a.txt").write_text("mine")
    with pytest.raises(ForeignFolderError, match="a folder elmo did not make"):
        atomic_folder(user, write("x"), overwrite=True, allowed=allowed)
    assert (user / "a.txt").read_text() == "mine"
    atomic_folder(user, write("x"), overwrite=True, allowed=allowed, recognise=lambda p: True)
    assert (user / "a.txt").read_text() == "x"
    assert sorted(os.listdir(tmp_path)) == ["out", "user"]  # no temporaries left


def test_remove_owned_folder_deletes_only_the_folder_it_checked(tmp_path):
    folder = tmp_path / "work"
    make_owned_folder(folder, "embed work file")
    (folder / "journal.bin").write_bytes(b"x")
    remove_owned_folder(folder, owner_id)
    assert os.listdir(tmp_path) == []
    # Swapped between the check and the deletion (another id the second time): put back, kept.
    make_owned_folder(folder, "embed work file")
    (folder / "journal.bin").write_bytes(b"precious")
    ids = iter(["checked", "swapped"])
    with pytest.raises(ForeignFolderError, match="changed while elmo was about to delete it"):
        remove_owned_folder(folder, lambda path: next(ids))
    assert (folder / "journal.bin").read_bytes() == b"precious"
    assert os.listdir(tmp_path) == ["work"]


def test_check_output_file_refuses_folders_and_existing_files(tmp_path):
    check_output_file(tmp_path / "new.hdf5")
    (tmp_path / "old.hdf5").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="already exists; pass --force"):
        check_output_file(tmp_path / "old.hdf5")
    check_output_file(tmp_path / "old.hdf5", overwrite=True)
    (tmp_path / "folder").mkdir()
    with pytest.raises(IsADirectoryError, match="folder: a folder is in the way of the output file"):
        check_output_file(tmp_path / "folder", overwrite=True)
    # A FIFO or a device is written through (never renamed over), without --force; where the
    # output must be a file (embed keeps its work beside it) it is refused.
    os.mkfifo(tmp_path / "fifo")
    check_output_file(tmp_path / "fifo")
    check_output_file("/dev/null")
    with pytest.raises(FileExistsError, match="fifo: a device, a pipe or a name under /dev or /proc"):
        check_output_file(tmp_path / "fifo", overwrite=True, through=False)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_output_file(tmp_path / "typo" / "out.hdf5", overwrite=True)


def test_claim_folder_takes_the_folder_another_process_made_at_the_same_moment(tmp_path, monkeypatch):
    """Two ranks of one torchrun job claim the shard folder at once: the second's rename lands on
    the first's folder, already in place with its marker (ENOTEMPTY), and the second takes that
    folder instead of failing (a flaky 'Directory not empty' in CI before). A folder of another
    kind made at that moment is still refused."""
    import elmo.fileio as fileio

    rename, made = os.rename, {}

    def other_process_first(kind):
        def racing_rename(source, target):
            if os.path.basename(os.fspath(source)).startswith(".") and not made:  # our folder, about to land
                made["id"] = claim_folder_without_race(target, kind)
            return rename(source, target)
        return racing_rename

    def claim_folder_without_race(target, kind):
        monkeypatch.setattr(fileio.os, "rename", rename)
        try:
            return fileio.make_owned_folder(target, kind)
        finally:
            monkeypatch.setattr(fileio.os, "rename", other_process_first(kind))

    monkeypatch.setattr(fileio.os, "rename", other_process_first("embeddings"))
    assert claim_folder(tmp_path / "out", "embeddings") == made["id"]
    assert read_owner(tmp_path / "out")["id"] == made["id"]
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no leftover of the losing process's folder
    made.clear()
    monkeypatch.setattr(fileio.os, "rename", other_process_first("training run"))
    with pytest.raises(ForeignFolderError, match="training run"):
        claim_folder(tmp_path / "other", "embeddings")


# ------------------------------------------------------------------ temporaries, inputs, OS errors
def test_temporaries_carry_a_name_no_user_chooses(tmp_path):
    from elmo.fileio import atomic_path, temporary_target

    with atomic_path(tmp_path / "out.hdf5") as tmp:
        name = os.path.basename(tmp)
        assert re.fullmatch(r"out\.hdf5\.elmo-tmp\.\d+\.[0-9a-f]{32}\.tmp", name), name
        assert temporary_target(name) == "out.hdf5"
    for users in ["out.hdf5.4000000.backup.tmp", "out.hdf5.elmo-tmp.1.backup.tmp", "out.hdf5.tmp", "notes.txt"]:
        assert temporary_target(users) is None


def test_check_folder_looks_into_sub_folders_and_at_what_a_write_makes(tmp_path):
    folder = tmp_path / "corpus"
    make_owned_folder(folder, "prepared corpus")
    (folder / "train").mkdir()
    (folder / "train" / "shard-00000.txt").write_text("a\n")
    allowed = {"train", "train/shard-00000.txt"}.__contains__
    assert check_folder(folder, "prepared corpus", allowed=allowed) is True
    (folder / "train" / "mine.txt").write_text("keep")
    with pytest.raises(ForeignFolderError, match="holds train/mine.txt, which elmo did not write there"):
        check_folder(folder, "prepared corpus", allowed=allowed)
    # Without the marker (recognised as from before it), only what the coming write makes goes.
    old = tmp_path / "old"
    old.mkdir()
    (old / "a.txt").write_text("x")
    (old / "b.txt").write_text("x")
    recognised = {"recognise": lambda p: True, "allowed": {"a.txt", "b.txt"}.__contains__}
    assert check_folder(old, "model folder", writes=["a.txt", "b.txt"], **recognised) is True
    with pytest.raises(ForeignFolderError, match="old: holds b.txt, which this model folder does not hold"):
        check_folder(old, "model folder", writes=["a.txt"], **recognised)
    # ... while one with the marker is elmo's: what it wrote there before may go.
    make_owned_folder(tmp_path / "ours", "model folder")
    (tmp_path / "ours" / "b.txt").write_text("x")
    assert check_folder(tmp_path / "ours", "model folder", writes=["a.txt"], allowed=recognised["allowed"])


def test_atomic_folder_keeps_an_unmarked_folders_files_the_write_does_not_make(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "a.txt").write_text("mine")
    (old / "b.txt").write_text("mine too")
    with pytest.raises(ForeignFolderError) as error:
        atomic_folder(old, lambda folder: (folder / "a.txt").write_text("new"), overwrite=True,
                      allowed={"a.txt", "b.txt"}.__contains__, recognise=lambda p: True)
    assert str(error.value).startswith(f"{old}: holds b.txt")  # the user's path, not elmo's private one
    assert (old / "a.txt").read_text() == "mine" and (old / "b.txt").read_text() == "mine too"
    assert sorted(os.listdir(tmp_path)) == ["old"]


def test_check_output_file_refuses_an_input_a_file_for_a_folder_and_names_the_option(tmp_path):
    (tmp_path / "in.txt").write_text("x")
    with pytest.raises(FileExistsError, match=r"--json .*in.txt: this is an input of the command"):
        check_output_file(tmp_path / "in.txt", overwrite=True, inputs=[str(tmp_path / "in.txt")], option="--json")
    with pytest.raises(NotADirectoryError, match=r"in.txt/out.json: .*in.txt is a file, not a folder"):
        check_output_file(tmp_path / "in.txt" / "out.json", overwrite=True)


def test_check_input_file_says_what_is_wrong(tmp_path):
    from elmo.fileio import check_input_file

    (tmp_path / "f.txt").write_text("x")
    check_input_file(tmp_path / "f.txt")
    check_input_file("-")
    with pytest.raises(FileNotFoundError, match="nope.txt: no such file; check the path"):
        check_input_file(tmp_path / "nope.txt")
    with pytest.raises(IsADirectoryError, match="a folder, where a file was expected"):
        check_input_file(tmp_path)
    with pytest.raises(NotADirectoryError, match="f.txt is a file, not a folder"):
        check_input_file(tmp_path / "f.txt" / "x")


def test_os_error_message_names_the_path_and_what_to_do():
    import errno

    from elmo.fileio import os_error_message

    def message(code, name="d"):
        return os_error_message(OSError(code, os.strerror(code), name))

    assert message(errno.EISDIR) == "d: a folder, where a file was expected; give a file"
    assert message(errno.ENOENT) == "d: no such file or folder; check the path (a typo, or a file not made yet?)"
    assert message(errno.ENOTDIR).startswith("d: a part of this path is a file, where a folder was expected; ")
    assert message(errno.EACCES).startswith("d: permission denied; ")
    assert message(errno.ENOSPC).startswith("d: no space left on the device; ")
    # A temporary name is never shown: the file it was to become is.
    assert message(errno.ENOSPC, f"/x/v.elmo-tmp.23778.{'a' * 32}.tmp").startswith("/x/v: no space left")
    assert "[Errno" not in message(errno.EPIPE) and message(errno.EPIPE).startswith("d: broken pipe")
    assert os_error_message(OSError(errno.EIO, "Input/output error")).startswith("Input/output error (a failing")
    assert os_error_message(FileNotFoundError("x: elmo's own words")) == "x: elmo's own words"

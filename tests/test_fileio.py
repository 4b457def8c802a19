"""File helpers (elmo.fileio)."""

import gzip
import os

from elmo.fileio import count_lines, read_lines


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

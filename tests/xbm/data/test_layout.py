import pickle

import pytest

from xbm.data.layout import find_file, read_rows
from xbm.errors import DatasetNotFoundError


def test_error_message_and_pickling(tmp_path):
    error = DatasetNotFoundError("sop", tmp_path / "Ebay_train.txt", "<data_root>/\n  Ebay_train.txt")
    text = str(error)
    assert text.startswith(f"data set 'sop': missing {tmp_path / 'Ebay_train.txt'}")
    assert "<data_root>/\n  Ebay_train.txt" in text and "never downloads" in text
    assert error.filename == str(tmp_path / "Ebay_train.txt") and isinstance(error, FileNotFoundError)
    clone = pickle.loads(pickle.dumps(error))  # Ray ships errors between processes
    assert type(clone) is DatasetNotFoundError and str(clone) == text


def test_find_file_prefers_order_and_names_the_first_base(tmp_path):
    (tmp_path / "wrap").mkdir()
    (tmp_path / "wrap" / "a.txt").write_text("x")
    assert find_file([tmp_path, tmp_path / "wrap"], "a.txt", "d", "L") == tmp_path / "wrap" / "a.txt"
    with pytest.raises(DatasetNotFoundError) as info:
        find_file([tmp_path / "wrap", tmp_path], "b.txt", "d", "L")
    assert info.value.path == str(tmp_path / "wrap" / "b.txt")


def test_read_rows_skips_headers_and_blank_lines(tmp_path):
    (tmp_path / "t.txt").write_text("3\nh1 h2\n a  b \n\nc d\n")
    assert read_rows(tmp_path / "t.txt", skip=2) == [["a", "b"], ["c", "d"]]

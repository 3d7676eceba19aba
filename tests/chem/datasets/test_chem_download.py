"""Finding and downloading tox21.csv.gz, against a local HTTP server on 127.0.0.1 only."""
import gzip
import hashlib
import http.server
import threading
from functools import partial

import pytest

from minitransformer.chem.datasets.download import (TOX21_FILENAME, ChecksumError, DownloadError,
                                           cache_dir, download_file, find_tox21,
                                           verify_gzip_csv)

CSV = b"mol_id,smiles\nA,CCO\nB,c1ccccc1\n"
CSV_SHA256 = hashlib.sha256(CSV).hexdigest()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    """Serve tmp_path/'site' at http://127.0.0.1:<port>/ with a small fake tox21.csv.gz."""
    site = tmp_path / "site"
    site.mkdir()
    (site / TOX21_FILENAME).write_bytes(gzip.compress(CSV, mtime=0))
    (site / "not_gzip.csv.gz").write_bytes(CSV)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", site
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty user cache, and no MINITRANSFORMER_DATA, so nothing real is found."""
    monkeypatch.delenv("MINITRANSFORMER_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "minitransformer"


def _leftovers(directory):
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_cache_dir_follows_xdg(cache):
    assert cache_dir() == cache


def test_download_success_verifies_decompressed_csv(server, cache):
    url, _ = server
    path = find_tox21(download=True, url=f"{url}/{TOX21_FILENAME}", sha256=CSV_SHA256, md5=None)
    assert path == cache / TOX21_FILENAME
    assert gzip.decompress(path.read_bytes()) == CSV
    assert _leftovers(cache) == [TOX21_FILENAME], "no temporary files may remain"
    # a second call finds the cached copy without the network
    assert find_tox21(url="http://127.0.0.1:9/unused", sha256=CSV_SHA256, md5=None) == path


def test_download_accepts_gzip_md5(server, cache):
    url, site = server
    md5 = hashlib.md5((site / TOX21_FILENAME).read_bytes()).hexdigest()
    path = find_tox21(download=True, url=f"{url}/{TOX21_FILENAME}", sha256="0" * 64, md5=md5)
    assert path.is_file()


def test_checksum_mismatch_raises_and_leaves_nothing(server, cache):
    url, _ = server
    with pytest.raises(ChecksumError) as err:
        find_tox21(download=True, url=f"{url}/{TOX21_FILENAME}", sha256="0" * 64, md5="0" * 32)
    assert CSV_SHA256 in str(err.value), "the message should show the checksum that was found"
    assert f"{TOX21_FILENAME} from {url}" in str(err.value) and ".tmp" not in str(err.value), \
        "the message names the download, not a temporary file"
    assert _leftovers(cache) == [], f"left behind: {_leftovers(cache)}"


def test_non_gzip_download_is_a_checksum_error(server, cache):
    url, _ = server
    with pytest.raises(ChecksumError, match="gzip"):
        download_file(f"{url}/not_gzip.csv.gz", cache / "x.csv.gz", sha256=CSV_SHA256, md5=None)
    assert _leftovers(cache) == []


def test_http_error_raises_download_error(server, cache):
    url, _ = server
    with pytest.raises(DownloadError, match="could not download"):
        find_tox21(download=True, url=f"{url}/missing.csv.gz", sha256=CSV_SHA256)
    assert _leftovers(cache) == []


def test_unreachable_server_fails_fast(cache):
    import socket

    with socket.socket() as s:  # find a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError):
        find_tox21(download=True, url=f"http://127.0.0.1:{port}/tox21.csv.gz", timeout=2)
    assert _leftovers(cache) == []


def test_not_found_without_download_lists_places(tmp_path, cache):
    with pytest.raises(FileNotFoundError) as err:
        find_tox21(tmp_path / "data")
    message = str(err.value)
    assert str(tmp_path / "data" / TOX21_FILENAME) in message and str(cache) in message


def test_search_order_data_dir_then_env_then_cache(tmp_path, cache, monkeypatch):
    gz = gzip.compress(CSV, mtime=0)
    places = {name: tmp_path / name for name in ("given", "env")}
    for directory in list(places.values()) + [cache]:
        directory.mkdir(parents=True)
        (directory / TOX21_FILENAME).write_bytes(gz)
    monkeypatch.setenv("MINITRANSFORMER_DATA", str(places["env"]))
    kw = dict(sha256=CSV_SHA256, md5=None)
    assert find_tox21(places["given"], **kw) == places["given"] / TOX21_FILENAME
    assert find_tox21(places["given"] / TOX21_FILENAME, **kw) == places["given"] / TOX21_FILENAME
    assert find_tox21(**kw) == places["env"] / TOX21_FILENAME
    monkeypatch.delenv("MINITRANSFORMER_DATA")
    assert find_tox21(**kw) == cache / TOX21_FILENAME


def test_found_file_is_verified(tmp_path, cache):
    (tmp_path / TOX21_FILENAME).write_bytes(gzip.compress(b"other,content\n"))
    with pytest.raises(ChecksumError):
        find_tox21(tmp_path, sha256=CSV_SHA256, md5=None)
    assert find_tox21(tmp_path, verify=False) == tmp_path / TOX21_FILENAME


def test_real_tox21_checksum(tox21_path):
    verify_gzip_csv(tox21_path)  # default pins: the decompressed CSV's sha256


def _dead_url():
    import socket

    with socket.socket() as s:  # a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/tox21.csv.gz"


def test_offline_message_says_where_to_put_the_file(tmp_path, cache, monkeypatch):
    """Offline, the one-line message names the file and both places for it."""
    mine = tmp_path / "my-data"
    monkeypatch.setenv("MINITRANSFORMER_DATA", str(mine))
    with pytest.raises(DownloadError) as err:
        find_tox21(download=True, url=_dead_url(), timeout=2)
    msg = str(err.value)
    assert "\n" not in msg
    assert str(mine / TOX21_FILENAME) in msg and str(cache / TOX21_FILENAME) in msg
    monkeypatch.delenv("MINITRANSFORMER_DATA")
    with pytest.raises(DownloadError) as err:
        find_tox21(download=True, url=_dead_url(), timeout=2)
    msg = str(err.value)
    assert "$MINITRANSFORMER_DATA" in msg and "not set" in msg and str(cache / TOX21_FILENAME) in msg


def test_not_found_message_is_one_line(tmp_path, cache):
    with pytest.raises(FileNotFoundError) as err:
        find_tox21(tmp_path / "data")
    assert "\n" not in str(err.value) and TOX21_FILENAME in str(err.value)

"""Tests for sciattn.pde_data.fetch against a local HTTP server on 127.0.0.1 (no internet)."""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import socket
import threading
import urllib.request
from pathlib import Path

import pytest

from sciattn.pde_data import fetch as F
from sciattn.pde_data.fetch import FetchError, RemoteFile, describe_sources, fetch, verify

PAYLOAD = bytes(range(256)) * 40 + b"tail"  # 10244 bytes
MD5 = "md5:" + hashlib.md5(PAYLOAD).hexdigest()
SHA256 = "sha256:" + hashlib.sha256(PAYLOAD).hexdigest()
FORMATS = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "formats.md"


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.files``; ``server.mode`` is "range" (honours Range), "ignore_range"
    (always 200 with the whole body) or "drop" (announces the full length, sends
    ``server.drop_after`` bytes, then closes the connection)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep pytest output quiet
        pass

    def do_GET(self):  # noqa: N802 (http.server API)
        srv = self.server
        rng = self.headers.get("Range")
        srv.requests.append((self.path, rng))
        body = srv.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if srv.mode == "range" and m:
            start = int(m.group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        chunk = body[start:]
        self.send_header("Content-Length", str(len(chunk)))
        self.end_headers()
        if srv.mode == "drop":
            self.wfile.write(chunk[: srv.drop_after])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(chunk)


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.files = {"/data.bin": PAYLOAD}
    srv.mode = "range"
    srv.drop_after = 0
    srv.requests = []
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=2)


@pytest.fixture
def opener():
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never use an env proxy


def _source(monkeypatch, files):
    monkeypatch.setitem(F.SOURCES, "local", files)


def _get(root, opener, name="local"):
    return fetch(name, root, progress=False, timeout=5, opener=opener)


def _no_leftovers(root: Path):
    return [p.name for p in root.rglob("*") if p.name.endswith((".part", ".tmp"))]


# ----------------------------------------------------------------------------- downloads


@pytest.mark.parametrize("checksum", [MD5, SHA256])
def test_download_verifies_and_places_atomically(server, opener, monkeypatch, tmp_path, checksum):
    _source(monkeypatch, [RemoteFile("sub/data.bin", server.base + "/data.bin", len(PAYLOAD), checksum)])
    paths = _get(tmp_path, opener)
    assert paths == [tmp_path.resolve() / "sub" / "data.bin"]
    assert paths[0].read_bytes() == PAYLOAD
    assert _no_leftovers(tmp_path) == []
    assert server.requests == [("/data.bin", None)]


def test_checksum_mismatch_names_digests_and_leaves_nothing(server, opener, monkeypatch, tmp_path):
    wrong = "md5:" + "0" * 32
    _source(monkeypatch, [RemoteFile("data.bin", server.base + "/data.bin", None, wrong)])
    with pytest.raises(ValueError) as info:
        _get(tmp_path, opener)
    msg = str(info.value)
    assert "data.bin" in msg and wrong in msg and MD5 in msg
    assert list(tmp_path.iterdir()) == []


def test_interrupted_download_resumes_with_range(server, opener, monkeypatch, tmp_path):
    _source(monkeypatch, [RemoteFile("data.bin", server.base + "/data.bin", len(PAYLOAD), MD5)])
    k = 3000
    server.mode, server.drop_after = "drop", k
    with pytest.raises(FetchError) as info:
        _get(tmp_path, opener)
    part = tmp_path / "data.bin.part"
    assert part.read_bytes() == PAYLOAD[:k]
    assert not (tmp_path / "data.bin").exists()
    assert server.base + "/data.bin" in str(info.value) and str(tmp_path.resolve() / "data.bin") in str(
        info.value
    )

    server.mode = "range"
    server.requests.clear()
    (path,) = _get(tmp_path, opener)
    assert server.requests == [("/data.bin", f"bytes={k}-")]
    assert path.read_bytes() == PAYLOAD
    assert not part.exists()


def test_interrupted_download_without_published_size(server, opener, monkeypatch, tmp_path):
    # No size in SOURCES: the Content-Length still reveals the short transfer.
    _source(monkeypatch, [RemoteFile("data.bin", server.base + "/data.bin")])
    server.mode, server.drop_after = "drop", 100
    with pytest.raises(FetchError):
        _get(tmp_path, opener)
    server.mode = "range"
    (path,) = _get(tmp_path, opener)
    assert server.requests[-1] == ("/data.bin", "bytes=100-")
    assert path.read_bytes() == PAYLOAD


def test_server_ignoring_range_restarts_from_zero(server, opener, monkeypatch, tmp_path):
    _source(monkeypatch, [RemoteFile("data.bin", server.base + "/data.bin", len(PAYLOAD), MD5)])
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD[:500])
    server.mode = "ignore_range"
    (path,) = _get(tmp_path, opener)
    assert server.requests == [("/data.bin", "bytes=500-")]
    assert path.read_bytes() == PAYLOAD
    assert _no_leftovers(tmp_path) == []


def test_stale_oversized_part_is_discarded(server, opener, monkeypatch, tmp_path):
    _source(monkeypatch, [RemoteFile("data.bin", server.base + "/data.bin", len(PAYLOAD), MD5)])
    (tmp_path / "data.bin.part").write_bytes(b"x" * (len(PAYLOAD) + 10))
    (path,) = _get(tmp_path, opener)
    assert server.requests == [("/data.bin", None)]
    assert path.read_bytes() == PAYLOAD


def test_unsatisfiable_range_restarts_from_zero(server, opener, monkeypatch, tmp_path):
    # A complete .part of unknown size: the server answers 416, the download starts over.
    _source(monkeypatch, [RemoteFile("data.bin", server.base + "/data.bin", None, MD5)])
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD)
    (path,) = _get(tmp_path, opener)
    assert server.requests == [("/data.bin", f"bytes={len(PAYLOAD)}-"), ("/data.bin", None)]
    assert path.read_bytes() == PAYLOAD


def test_offline_raises_fetcherror_naming_url_and_target(opener, monkeypatch, tmp_path):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/data.bin"
    _source(monkeypatch, [RemoteFile("data.bin", url, len(PAYLOAD), MD5)])
    with pytest.raises(FetchError) as info:
        _get(tmp_path, opener)
    assert isinstance(info.value, ConnectionError)
    assert url in str(info.value) and str(tmp_path.resolve() / "data.bin") in str(info.value)


def test_http_error_is_fetcherror(server, opener, monkeypatch, tmp_path):
    _source(monkeypatch, [RemoteFile("gone.bin", server.base + "/gone.bin")])
    with pytest.raises(FetchError, match="404"):
        _get(tmp_path, opener)


def test_present_file_with_matching_checksum_is_not_downloaded(server, opener, monkeypatch, tmp_path):
    (tmp_path / "data.bin").write_bytes(PAYLOAD)
    _source(monkeypatch, [RemoteFile("data.bin", server.base + "/data.bin", len(PAYLOAD), MD5)])
    assert _get(tmp_path, opener) == [tmp_path.resolve() / "data.bin"]
    assert server.requests == []


def test_present_file_with_wrong_checksum_is_replaced(server, opener, monkeypatch, tmp_path):
    (tmp_path / "data.bin").write_bytes(b"corrupt")
    _source(monkeypatch, [RemoteFile("data.bin", server.base + "/data.bin", None, MD5)])
    (path,) = _get(tmp_path, opener)
    assert path.read_bytes() == PAYLOAD and len(server.requests) == 1


def test_default_opener_and_progress_bar(server, monkeypatch, tmp_path):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    _source(monkeypatch, [RemoteFile("data.bin", server.base + "/data.bin", len(PAYLOAD), MD5)])
    (path,) = fetch("local", tmp_path, progress=True, timeout=5)
    assert path.read_bytes() == PAYLOAD


# ----------------------------------------------------------------------------- source kinds


def test_zenodo_record_supplies_link_size_and_md5(server, opener, monkeypatch, tmp_path):
    record = {
        "files": [
            {"key": "other.tgz", "size": 1, "checksum": "md5:" + "1" * 32, "links": {"self": "nope"}},
            {
                "key": "data.tgz",
                "size": len(PAYLOAD),
                "checksum": MD5,
                "links": {"self": server.base + "/data.bin"},
            },
        ]
    }
    server.files["/api/records/7"] = json.dumps(record).encode()
    _source(monkeypatch, [RemoteFile("data.tgz", server.base + "/api/records/7", kind="zenodo")])
    (path,) = _get(tmp_path, opener)
    assert path.read_bytes() == PAYLOAD
    assert [p for p, _ in server.requests] == ["/api/records/7", "/data.bin"]

    # The record's md5 is enforced.
    record["files"][1]["checksum"] = "md5:" + "f" * 32
    server.files["/api/records/7"] = json.dumps(record).encode()
    path.unlink()
    with pytest.raises(ValueError, match="checksum mismatch"):
        _get(tmp_path, opener)
    assert list(tmp_path.iterdir()) == []


def test_zenodo_file_missing_from_record(server, opener, monkeypatch, tmp_path):
    server.files["/api/records/7"] = json.dumps({"files": []}).encode()
    _source(monkeypatch, [RemoteFile("data.tgz", server.base + "/api/records/7", kind="zenodo")])
    with pytest.raises(FetchError, match="not found in the Zenodo record"):
        _get(tmp_path, opener)


def test_manual_source_explains_step_then_accepts_placed_file(server, opener, monkeypatch, tmp_path):
    url = "https://drive.google.com/drive/folders/XYZ"
    _source(monkeypatch, [RemoteFile("a.mat", url, kind="manual"), RemoteFile("b.mat", url, kind="manual")])
    (tmp_path / "a.mat").write_bytes(b"a")
    with pytest.raises(FetchError) as info:
        _get(tmp_path, opener)
    msg = str(info.value)
    assert url in msg and str(tmp_path.resolve() / "b.mat") in msg and "a.mat:" not in msg
    (tmp_path / "b.mat").write_bytes(b"b")
    assert _get(tmp_path, opener) == [tmp_path.resolve() / "a.mat", tmp_path.resolve() / "b.mat"]
    assert server.requests == []


def test_unknown_name_lists_known_names(tmp_path):
    with pytest.raises(ValueError) as info:
        fetch("no_such_benchmark", tmp_path, progress=False)
    assert "no_such_benchmark" in str(info.value) and "darcy_pt_16" in str(info.value)


# ----------------------------------------------------------------------------- verify and the table


def test_verify(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(PAYLOAD)
    assert verify(p, MD5) and verify(p, SHA256) and verify(p, MD5.upper().replace("MD5", "md5"))
    assert not verify(p, "md5:" + "0" * 32)
    assert not verify(tmp_path / "missing", MD5)
    with pytest.raises(ValueError):
        verify(p, "crc32:1234")


def test_describe_sources_rows():
    rows = describe_sources()
    assert [r["name"] for r in rows] == list(F.SOURCES)
    by = {r["name"]: r for r in rows}
    assert by["darcy_pt_16"]["checksum"] == "from Zenodo record"
    assert by["fno_darcy"]["files"] == [
        "piececonst_r421_N1024_smooth1.mat",
        "piececonst_r421_N1024_smooth2.mat",
    ]
    assert by["shapenet_car"]["urls"] == ["http://www.nobuyuki-umetani.com/publication/mlcfd_data.zip"]
    for r in rows:
        assert set(r) >= {"name", "files", "urls", "checksum", "checksum_known"}


def test_sources_invent_nothing():
    """formats.md publishes no checksums or exact sizes; every URL comes from a host it names. The only
    checksummed files are neuraloperator's bundled ones, pinned to a commit (test_fetch_small checks their
    sha256 against the shared copies)."""
    from sciattn.pde_data.downloads import NEURALOP_RAW

    stated = {
        "https://drive.google.com/drive/folders/1UnbQh2WWc6knEHbLn-ZaXrKUZhp7pjt-": None,
        "https://drive.google.com/drive/folders/1YBuaoTdOSr_qzaow-G-iwvbUI7fiUzu8": None,
        "https://zenodo.org/api/records/12784353": "12784353",
        "https://zenodo.org/api/records/12825163": "12825163",
        "https://doi.org/10.18419/darus-2986": "doi:10.18419/darus-2986",
        "https://sdsc-users.flatironinstitute.org/~polymathic/data/the_well/datasets/": None,
        "http://www.nobuyuki-umetani.com/publication/mlcfd_data.zip": None,
        "https://data.isir.upmc.fr/extrality/NeurIPS_2022/Dataset.zip": None,
    }
    for files in F.SOURCES.values():
        for rf in files:
            if rf.url.startswith(NEURALOP_RAW):
                assert rf.url == NEURALOP_RAW + rf.name and rf.checksum.startswith("sha256:") and rf.kind == "direct"
                continue
            assert rf.checksum is None and rf.size is None, rf
            assert any(rf.url.startswith(prefix) for prefix in stated), rf.url
            if rf.kind == "manual":
                assert rf.notes
    if FORMATS.is_file():
        text = FORMATS.read_text()
        for prefix, anchor in stated.items():
            assert (anchor or prefix) in text, prefix

"""``sciattn data fetch``: the small public files through pooch, sha256-checked, from the catalogue's sources,
against a local HTTP server on 127.0.0.1 that serves copies written here (a truncated one included)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import socket
import threading
from pathlib import Path

import pytest
import torch

from sciattn import pde_data
from sciattn.pde_data import fetch as F
from sciattn.pde_data.downloads import NEURALOP_SHA256, SMALL, RemoteFile
from sciattn.pde_data.neuralop_pt import write_neuralop_pt
from sciattn.train.cli import main


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def served(tmp_path):
    """A server on 127.0.0.1 over ``tmp_path/www``; ``.base`` its URL."""
    www = tmp_path / "www"
    www.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 (http.server API)
            self.server.requests.append(self.path)
            super().do_GET()

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(www)))
    srv.daemon_threads, srv.requests = True, []
    srv.www, srv.base = www, f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=2)


@pytest.fixture
def no_proxy(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def small_files(served, monkeypatch, no_proxy):
    """Small stand-ins of the SMALL groups' files (neuraloperator's layout), served locally; the groups' sources
    point at them with their sha256. Returns ``{name: bytes}``."""
    g = torch.Generator().manual_seed(0)
    for name in ("darcy_train_16.pt", "darcy_test_16.pt", "darcy_test_32.pt", "burgers_train_16.pt",
                 "burgers_test_16.pt"):
        r = 32 if "32" in name else 16
        shape = (6, r, r) if name.startswith("darcy") else (6, r)
        write_neuralop_pt(served.www / name, torch.rand(shape, generator=g) > 0.5, torch.rand(shape, generator=g))
    torch.save([{"vertices": torch.rand(5, 3, generator=g)}], served.www / "mini_car.pt")
    for group in SMALL:
        files = F.SOURCES[group]
        monkeypatch.setitem(F.SOURCES, group, [RemoteFile(f.name, f"{served.base}/{f.name}",
                                                          checksum=_sha256(served.www / f.name)) for f in files])
    return {p.name: p.read_bytes() for p in served.www.iterdir()}


def test_small_groups_are_the_neuralop_files_with_sha256():
    names = [f.name for g in SMALL for f in F.SOURCES[g]]
    assert sorted(names) == sorted(NEURALOP_SHA256)
    assert all(f.checksum == "sha256:" + NEURALOP_SHA256[f.name] for g in SMALL for f in F.SOURCES[g])


def test_small_checksums_match_the_shared_copies(shared_data):
    for name, digest in NEURALOP_SHA256.items():
        if (shared_data / name).is_file():
            assert _sha256(shared_data / name) == "sha256:" + digest, name


def test_data_fetch_places_checked_files_where_load_finds_them(small_files, tmp_path, monkeypatch, capsys):
    root = tmp_path / "cache"
    monkeypatch.setenv("SCIATTN_DATA", str(root))
    assert main(["data", "fetch"]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in root.iterdir()) == sorted(small_files)
    assert all((root / n).read_bytes() == b for n, b in small_files.items())
    assert out.count("ok ") == len(small_files) and str(root / "mini_car.pt") in out
    train = pde_data.load("darcy_pt", split="train")  # default root: $SCIATTN_DATA
    want = torch.load(root / "darcy_train_16.pt", weights_only=True)
    torch.testing.assert_close(train.y[:, 0], want["y"].float(), rtol=0, atol=0)


def test_truncated_download_is_refused_then_fetched_again(small_files, served, tmp_path):
    root = tmp_path / "cache"
    full = served.www / "darcy_test_16.pt"
    full.write_bytes(small_files["darcy_test_16.pt"][:1000])  # the server sends a truncated copy
    with pytest.raises(ValueError) as info:
        F.fetch("neuralop_darcy_16", root, progress=False)
    msg = str(info.value)
    assert "darcy_test_16.pt: checksum mismatch" in msg and f"{served.base}/darcy_test_16.pt" in msg
    assert _sha256(full) in msg and "\n" not in msg
    assert not (root / "darcy_test_16.pt").exists()
    assert [p.name for p in root.iterdir()] == ["darcy_train_16.pt"]  # nothing partial is left
    full.write_bytes(small_files["darcy_test_16.pt"])  # the server is fixed: fetched in full
    F.fetch("neuralop_darcy_16", root, progress=False)
    assert (root / "darcy_test_16.pt").read_bytes() == small_files["darcy_test_16.pt"]


def test_truncated_file_on_disk_is_detected_and_replaced(small_files, served, tmp_path, capsys):
    root = tmp_path / "cache"
    assert main(["data", "fetch", "neuralop_mini_car", "--root", str(root)]) == 0
    car = root / "mini_car.pt"
    car.write_bytes(small_files["mini_car.pt"][:-7])  # an interrupted copy, a disk error, ...
    assert main(["data", "fetch", "neuralop_mini_car", "--root", str(root)]) == 0
    assert car.read_bytes() == small_files["mini_car.pt"]
    assert served.requests == ["/mini_car.pt"] * 2
    assert main(["data", "fetch", "neuralop_mini_car", "--root", str(root)]) == 0  # intact: kept as it is
    assert car.read_bytes() == small_files["mini_car.pt"] and served.requests == ["/mini_car.pt"] * 2


def test_offline_is_one_line_naming_file_url_and_manual_place(small_files, tmp_path, monkeypatch, capsys):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/burgers_train_16.pt"
    monkeypatch.setitem(F.SOURCES, "neuralop_burgers_16", [RemoteFile("burgers_train_16.pt", url,
                                                                      checksum="sha256:" + "0" * 64)])
    root = tmp_path / "cache"
    assert main(["data", "fetch", "neuralop_burgers_16", "--root", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("sciattn data: error: burgers_train_16.pt: could not download")
    assert url in err and f"save it as {root.resolve() / 'burgers_train_16.pt'}" in err
    assert not root.exists() or list(root.iterdir()) == []


def test_data_list_shows_formats_and_small_sources(capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "| neuralop_pt | neuraloperator .pt file" in out and "| xarray |" in out
    for group in SMALL:
        assert f"| {group} | direct | yes |" in out
    assert "| darcy_pt_16 | zenodo | from Zenodo record | darcy_16.tgz |" in out

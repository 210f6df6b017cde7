"""Checkpoints: weights_only round trip, atomic writes, clear errors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from sciattn.operators import create_operator
from sciattn.pde_data.normalizers import UnitGaussianNormalizer
from sciattn.train.checkpoint import atomic_torch_save, load_checkpoint, load_model, save_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _file_errors import check_missing_and_corrupt  # noqa: E402


def _model():
    return create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=16, n_layers=1,
                           n_heads=2, regressor_width=8, n_modes=4)


def test_round_trip_with_weights_only(tmp_path):
    model = _model()
    xn = UnitGaussianNormalizer().fit(torch.randn(10, 1, 8, 8) * 3 + 1)
    yn = UnitGaussianNormalizer().fit(torch.randn(10, 1, 8, 8) * 0.1)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 1, 8, 8)).sum().backward()
    opt.step()
    path = save_checkpoint(tmp_path / "ck.pt", model=model, x_normalizer=xn, y_normalizer=yn, optimizer=opt,
                           run_config={"train": {"lr": 1e-3}}, epoch=3, metrics={"rel_l2": 0.1})
    raw = torch.load(path, weights_only=True)  # must not need pickled classes
    assert raw["epoch"] == 3 and json.loads(raw["metrics"]) == {"rel_l2": 0.1}
    loaded, xn2, yn2, _ = load_model(tmp_path / "ck.pt")
    x = torch.randn(3, 1, 12, 12)
    model.eval()
    torch.testing.assert_close(yn2.decode(loaded(xn2.encode(x))), yn.decode(model(xn.encode(x))))


def test_failed_write_keeps_the_previous_file(tmp_path):
    target = tmp_path / "ck.pt"
    atomic_torch_save({"v": torch.tensor(1)}, target)

    class Boom:
        def __reduce__(self):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_torch_save({"v": Boom()}, target)
    assert torch.load(target, weights_only=True)["v"] == 1
    assert os.listdir(tmp_path) == ["ck.pt"]  # no temporary file left behind


def test_missing_and_corrupt_checkpoints_name_the_path(tmp_path):
    check_missing_and_corrupt(load_checkpoint, tmp_path / "nothing.pt", "nothing.pt", tmp_path / "bad.pt",
                              b"not a checkpoint", "bad.pt")
    other = tmp_path / "other.pt"
    torch.save({"a": 1}, other)
    with pytest.raises(ValueError, match="is not a sciattn checkpoint"):
        load_checkpoint(other)


def test_a_write_error_names_the_target_and_leaves_no_temp_file(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    from sciattn.train.checkpoint import atomic_write_bytes

    seen = []
    real = Path.write_bytes

    def full(self, data):
        seen.append(self.name)
        raise OSError(errno.ENOSPC, "No space left on device")  # what write() raises: no file name

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(OSError) as info:
        atomic_write_bytes(b"{}", tmp_path / "metrics.json")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "metrics.json")
    (name,) = seen
    assert name.startswith(f".metrics.json.{os.getpid()}.") and name.endswith(".tmp")  # the writer's PID
    monkeypatch.setattr(Path, "write_bytes", real)

    def torch_full(obj, fh):
        fh.write(b"PK")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", torch_full)
    with pytest.raises(OSError) as info:
        atomic_torch_save({"a": 1}, tmp_path / "ck.pt")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "ck.pt")
    assert os.listdir(tmp_path) == []

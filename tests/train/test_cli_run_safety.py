"""``sciattn train`` never overwrites or loses a run: an existing run needs --resume or --force,
--resume needs a checkpoint, the run directory is checked for writes before training, OS errors are
one line, stale temporary files of killed writes are removed, files follow the umask, and a
finished cosine run extends with a raised train.epochs (a OneCycle run is refused)."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sciattn import _io
from sciattn.train import trainer as trainer_module
from sciattn.train.cli import main
from sciattn.train.train_state import restore_training_state

FAST = ["--no-progress", "--set", "train.threads=1", "--set", "train.tensorboard=false"]


@pytest.fixture(scope="module")
def tiny(tiny_darcy):
    return tiny_darcy("run_safety", n_train=8, n_test=2, epochs=1)


@pytest.fixture(scope="module")
def finished(tiny, tmp_path_factory):
    """A finished 1-epoch run (OneCycle, the config's default schedule)."""
    root, cfg = tiny
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["train", str(cfg), "--out", str(out), *FAST]) == 0
    return out


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_an_existing_run_is_refused_and_left_byte_identical(tiny, finished, capsys, one_thread):
    root, cfg = tiny
    before = _snapshot(finished)
    assert {"checkpoint.pt", "metrics.json"} <= set(before)
    capsys.readouterr()
    assert main(["train", str(cfg), "--out", str(finished), *FAST]) == 2
    err = _error_line(capsys)
    assert err.startswith("sciattn train: error: --out: ") and str(finished) in err
    assert "checkpoint.pt, metrics.json" in err and "--resume" in err and "--force" in err
    assert _snapshot(finished) == before
    # metrics.json alone (a run whose checkpoint was removed) is a run too
    lone = finished.parent / "lone"
    lone.mkdir()
    (lone / "metrics.json").write_text("{}\n")
    assert main(["train", str(cfg), "--out", str(lone), *FAST]) == 2
    assert "already holds a run (metrics.json)" in _error_line(capsys)
    # an empty directory, or one holding other files, is no run
    other = finished.parent / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    assert main(["train", str(cfg), "--out", str(other), *FAST]) == 0
    assert (other / "notes.txt").read_text() == "mine\n" and (other / "checkpoint.pt").is_file()


def test_force_replaces_the_run(tiny, tmp_path, capsys, one_thread):
    root, cfg = tiny
    out = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(out), *FAST]) == 0
    (out / "eval").mkdir()
    (out / "eval" / "old_report.md").write_text("old model\n")
    (out / "notes.txt").write_text("mine\n")
    old = torch.load(out / "checkpoint.pt", weights_only=True)
    assert main(["train", str(cfg), "--out", str(out), "--force", *FAST, "--set", "train.seed=11"]) == 0
    new = torch.load(out / "checkpoint.pt", weights_only=True)
    assert json.loads(new["run_config"])["train"]["seed"] == 11 != json.loads(old["run_config"])["train"]["seed"]
    assert not (out / "eval").exists() and (out / "notes.txt").read_text() == "mine\n"
    assert len(json.loads((out / "metrics.json").read_text())["history"]) == 1
    capsys.readouterr()
    assert main(["train", str(cfg), "--out", str(out), "--force", "--resume", *FAST]) == 2
    assert "--resume, --force: expected one of them" in _error_line(capsys)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--force" in (help_text := " ".join(capsys.readouterr().out.split())) and "replace the run" in help_text


def test_resume_without_a_checkpoint_is_an_error(tiny, tmp_path, capsys):
    root, cfg = tiny
    for args in (["train", str(cfg), "--out", str(tmp_path / "empty"), "--resume"],
                 ["train", "--resume", str(tmp_path / "empty")]):
        capsys.readouterr()
        assert main([*args, *FAST]) == 2
        err = _error_line(capsys)
        assert err.startswith("sciattn train: error: --resume: no checkpoint") and str(tmp_path / "empty") in err
    assert not (tmp_path / "empty").exists()


def test_a_directory_that_cannot_be_written_fails_before_training(tiny, tmp_path, capsys, monkeypatch):
    root, cfg = tiny
    built = []
    monkeypatch.setattr("sciattn.train.run.build_datasets", lambda *a, **k: built.append(1) or 1 / 0)
    # chmod 0o555 stops writes for a normal user, not for root (and os.access lies for root too)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        can_write = True
        try:
            (ro / "x").write_bytes(b"")
            (ro / "x").unlink()
        except PermissionError:
            can_write = False
        if not can_write:
            assert main(["train", str(cfg), "--out", str(ro / "run"), *FAST]) == 2
            err = _error_line(capsys)
            assert str(ro / "run") in err and "Permission denied" in err
    finally:
        ro.chmod(0o755)
    # root too: --out below a regular file cannot be created
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    capsys.readouterr()
    assert main(["train", str(cfg), "--out", str(blocker / "run"), *FAST]) == 2
    err = _error_line(capsys)
    assert str(blocker / "run") in err and "Not a directory" in err and "writable" in err
    # a read-only file system, simulated at the probe's write (the same atomic-write helper training uses)
    real_write = Path.write_bytes

    def failing(errno_code, message):
        def write_bytes(self, data):
            if ".sciattn-write-probe." in self.name:
                raise OSError(errno_code, message)
            return real_write(self, data)
        return write_bytes

    monkeypatch.setattr(Path, "write_bytes", failing(errno.EROFS, "Read-only file system"))
    assert main(["train", str(cfg), "--out", str(tmp_path / "rofs"), *FAST]) == 2
    err = _error_line(capsys)
    assert err.startswith("sciattn train: error: ") and "Read-only file system" in err
    assert str(tmp_path / "rofs") in err
    monkeypatch.setattr(Path, "write_bytes", failing(errno.ENOSPC, "No space left on device"))
    assert main(["train", str(cfg), "--out", str(tmp_path / "full"), *FAST]) == 2
    err = _error_line(capsys)
    assert f"disk full while writing '{tmp_path / 'full' / '.sciattn-write-probe'}'" in err
    assert not built  # nothing was built, let alone trained
    assert [p.name for p in (tmp_path / "full").iterdir()] == []  # no temporary file left


def test_os_and_import_errors_are_one_line(tiny, tmp_path, capsys, monkeypatch):
    root, cfg = tiny

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    # ENOSPC while writing a checkpoint after training started: the atomic write names the file
    monkeypatch.setattr(torch, "save", full_disk)
    assert main(["train", str(cfg), "--out", str(tmp_path / "r"), *FAST]) == 2
    assert _error_line(capsys) == f"sciattn train: error: disk full while writing '{tmp_path / 'r' / 'checkpoint.pt'}'"
    assert not (tmp_path / "r").exists()  # failed before its first checkpoint: no run folder (nor .tmp) is left

    def no_module(*a, **k):
        raise ImportError("No module named 'tensorboard'", name="tensorboard")

    monkeypatch.setattr("sciattn.train.run.build_datasets", no_module)
    assert main(["train", str(cfg), "--out", str(tmp_path / "i"), *FAST]) == 2
    err = _error_line(capsys)
    assert "cannot import 'tensorboard'" in err and "No module named 'tensorboard'" in err
    assert not (tmp_path / "i").exists()

    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "data.pt"))

    monkeypatch.setattr("sciattn.train.run.build_datasets", denied)
    assert main(["train", str(cfg), "--out", str(tmp_path / "p"), *FAST]) == 2
    assert _error_line(capsys) == f"sciattn train: error: '{tmp_path / 'data.pt'}': Permission denied"


def test_stale_temporary_files_are_removed_at_the_next_start(tiny, tmp_path, one_thread):
    root, cfg = tiny
    out = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(out), *FAST]) == 0
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a PID that is no longer alive (reuse within the test is practically impossible)
    stale = [out / f".checkpoint.pt.{dead.pid}.abcd_123.tmp", out / ".metrics.json.x1y2z3w4.tmp"]  # + old naming
    live = out / f".metrics.csv.{os.getpid()}.qwertyui.tmp"  # this process: alive, kept
    foreign = out / ".notes.tmp"  # not an atomic-write name
    for p in (*stale, live, foreign):
        p.write_bytes(b"partial")
    assert main(["train", str(cfg), "--out", str(out), "--resume", *FAST]) == 0
    assert not any(p.exists() for p in stale) and live.exists() and foreign.exists()
    # the rule itself
    assert _io.remove_stale_temp_files(tmp_path / "missing") == []


def test_a_killed_atomic_write_leaves_a_temp_file_that_the_next_start_removes(tiny, tmp_path, one_thread):
    root, cfg = tiny
    out = tmp_path / "run"
    script = ("import os, sys\nfrom sciattn._io import atomic_path\n"
              "with atomic_path(sys.argv[1]) as tmp:\n    tmp.write_bytes(b'half')\n    os._exit(9)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(out / "checkpoint.pt")])
    assert proc.wait() == 9
    (tmp,) = [p for p in out.iterdir()]
    assert tmp.name.startswith(f".checkpoint.pt.{proc.pid}.") and tmp.suffix == ".tmp"
    assert main(["train", str(cfg), "--out", str(out), *FAST]) == 0  # no checkpoint.pt: not a run yet
    assert not tmp.exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_follow_the_umask(tmp_path, umask, mode):
    from sciattn.train.checkpoint import atomic_torch_save, atomic_write_bytes

    old = os.umask(umask)
    try:
        atomic_write_bytes(b"{}\n", tmp_path / "metrics.json")
        atomic_torch_save({"a": torch.zeros(2)}, tmp_path / "checkpoint.pt")
        assert _io.file_mode() == mode
    finally:
        os.umask(old)
    for name in ("metrics.json", "checkpoint.pt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


def test_run_files_follow_the_umask(tiny, tmp_path, one_thread):
    root, cfg = tiny
    old = os.umask(0o022)
    try:
        assert main(["train", str(cfg), "--out", str(tmp_path / "run"), *FAST]) == 0
    finally:
        os.umask(old)
    for name in ("checkpoint.pt", "metrics.json", "metrics.csv"):
        assert stat.S_IMODE((tmp_path / "run" / name).stat().st_mode) == 0o644, name


def test_raised_epochs_extend_a_finished_cosine_run(tiny, tmp_path, capsys, monkeypatch, one_thread):
    root, cfg = tiny
    out = tmp_path / "run"
    cosine = [*FAST, "--set", 'train.scheduler="cosine"', "--set", "train.batch_size=4"]
    assert main(["train", str(cfg), "--out", str(out), *cosine, "--set", "train.epochs=2"]) == 0
    seen = {}

    def spy(tr):
        found = restore_training_state(tr)
        seen.update(step=tr.step, total=tr.scheduler.T_max, lr=tr.optimizer.param_groups[0]["lr"],
                    base=tr.scheduler.base_lrs[0])
        return found

    monkeypatch.setattr(trainer_module, "restore_training_state", spy)
    lrs = []
    step = trainer_module.Trainer._train_step

    def record(self, batch):
        out_ = step(self, batch)
        lrs.append((self.step + 1, self.scheduler.get_last_lr()[0]))
        return out_

    monkeypatch.setattr(trainer_module.Trainer, "_train_step", record)
    assert main(["train", "--resume", str(out), *cosine, "--set", "train.epochs=4"]) == 0
    # 2 steps per epoch: resumed at step 4 on the cosine of 8 steps
    assert seen["step"] == 4 and seen["total"] == 8
    assert seen["lr"] == pytest.approx(seen["base"] / 2)
    for s, lr in lrs:
        assert lr == pytest.approx(seen["base"] * (1 + math.cos(math.pi * s / 8)) / 2, abs=1e-12), s
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 4 and state["step"] == 8
    assert json.loads(state["run_config"])["train"]["epochs"] == 4
    assert [r["epoch"] for r in json.loads((out / "metrics.json").read_text())["history"]] == [1, 2, 3, 4]
    capsys.readouterr()
    assert main(["train", "--resume", str(out), *cosine, "--set", "train.epochs=3"]) == 2
    err = _error_line(capsys)
    assert "train.epochs: " in err and "has trained 4 epoch(s); expected at least 4, got 3" in err


def test_raised_epochs_refuse_a_onecycle_run(tiny, finished, capsys):
    before = _snapshot(finished)
    capsys.readouterr()
    assert main(["train", "--resume", str(finished), *FAST, "--set", "train.epochs=3"]) == 2
    err = _error_line(capsys)
    assert "train.epochs: a OneCycle run cannot be extended" in err and str(finished / "checkpoint.pt") in err
    assert _snapshot(finished) == before


def test_under_torchrun_every_rank_refuses_an_existing_run(tiny, finished):
    root, cfg = tiny
    before = _snapshot(finished)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "sciattn.train.cli", "train", str(cfg), "--out", str(finished), *FAST]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode != 0
    # rank 0 checked; its error reached rank 1 through the process group (no rank trained or hung)
    assert proc.stderr.count("sciattn train: error: --out: ") == 2, proc.stderr[-3000:]
    assert "train/run.py" not in proc.stderr and "train/cli.py" not in proc.stderr  # no rank traceback (torchrun prints its own)
    assert _snapshot(finished) == before

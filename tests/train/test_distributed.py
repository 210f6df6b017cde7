"""Data parallel training: W gloo ranks with global batch B reach the weights of one process with
batch B (the gradient identity in sciattn.train.distributed), through the Trainer (spawn) and
through `torchrun ... sciattn train` (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from sciattn.train.config import ConfigError
from sciattn.train.distributed import ResumableDistributedSampler, per_rank_batch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ddp_worker  # noqa: E402


def _assert_same_weights(a: dict, b: dict, atol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=atol, msg=lambda m, k=k: f"{k}: {m}")


def test_sampler_shards_union_to_the_single_process_batches():
    data = list(range(16))
    single = ResumableDistributedSampler(data, num_replicas=1, rank=0, seed=3, batch_size=4)
    ranks = [ResumableDistributedSampler(data, num_replicas=2, rank=r, seed=3, batch_size=2) for r in (0, 1)]
    for epoch in (0, 1):
        single.set_position(epoch)
        for s in ranks:
            s.set_position(epoch)
        full = list(single)
        shards = [list(s) for s in ranks]
        for step in range(4):
            assert sorted(shards[0][2 * step:2 * step + 2] + shards[1][2 * step:2 * step + 2]) == \
                sorted(full[4 * step:4 * step + 4])
        # resuming after k batches replays the same permutation's tail
        single.set_position(epoch, start_batch=3)
        assert list(single) == full[12:] and len(single) == 4
    single.set_position(0)
    first = list(single)
    single.set_position(1)
    assert list(single) != first  # a new permutation each epoch


def test_batch_not_divisible_by_ranks_names_the_key():
    assert per_rank_batch(8, 2, 2) == (4, 2)
    with pytest.raises(ConfigError, match=r"train.batch_size: expected a multiple of world size x "
                                          r"train.grad_accum_steps = 3 x 1 = 3.*got 8"):
        per_rank_batch(8, 3)


def test_two_gloo_ranks_equal_one_process_spawned(tmp_path):
    """mp.spawn two gloo ranks through a file store; the DDP run also accumulates two micro-batches."""
    _ddp_worker.make_trainer(tmp_path / "single").fit()
    mp.spawn(_ddp_worker.worker, args=(2, str(tmp_path / "store"), str(tmp_path / "ddp"), {"grad_accum_steps": 2}),
             nprocs=2, join=True)
    single = torch.load(tmp_path / "single" / "checkpoint.pt", weights_only=True)
    ddp = torch.load(tmp_path / "ddp" / "checkpoint.pt", weights_only=True)
    _assert_same_weights(single["model"], ddp["model"])
    assert ddp["step"] == single["step"] == 8 and ddp["training"]["world_size"] == 2
    assert len(ddp["training"]["rng_states"]) == 2  # every rank's RNG state is kept
    h1, h2 = (json.loads(s["metrics"])["history"] for s in (single, ddp))
    for a, b in zip(h1, h2, strict=True):  # training loss and sharded evaluation agree
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["test_rel_l2"] == pytest.approx(b["test_rel_l2"], rel=1e-5)


@pytest.mark.slow
def test_torchrun_cli_equals_single_process(tiny_darcy, tmp_path):
    from sciattn.train.config import load_config
    from sciattn.train.run import train_run

    root, cfg = tiny_darcy("ddp_cli", n_train=16, n_test=4, epochs=2)
    overrides = ["train.batch_size=4", "train.tensorboard=false"]
    train_run(load_config(cfg, overrides), tmp_path / "single", progress=False, log=lambda m: None)
    sets = [a for o in overrides for a in ("--set", o)]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "sciattn.train.cli", "train", str(cfg), "--out", str(tmp_path / "ddp"), "--no-progress", *sets]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 ranks" in proc.stdout
    single = torch.load(tmp_path / "single" / "checkpoint.pt", weights_only=True)
    ddp = torch.load(tmp_path / "ddp" / "checkpoint.pt", weights_only=True)
    _assert_same_weights(single["model"], ddp["model"])
    m1, m2 = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("single", "ddp"))
    assert m2["world_size"] == 2
    assert m1["test"]["test_8x8"]["rel_l2"] == pytest.approx(m2["test"]["test_8x8"]["rel_l2"], rel=1e-5)


def test_wrap_ddp_searches_unused_parameters_only_for_models_that_declare_a_skipped_branch(tmp_path):
    import torch.distributed as dist

    from sciattn.operators import create_operator
    from sciattn.train.distributed import wrap_ddp

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        plain = create_operator("codano", variables=["a", "b"], width=8, n_layers=1, n_heads=2, n_modes=4,
                                pos_modes=2)
        extra = create_operator("codano", variables=["a", "b"], extra_variables=["c"], width=8, n_layers=1,
                                n_heads=2, n_modes=4, pos_modes=2)
        band = create_operator("galerkin_transformer", in_channels=1, out_channels=1, d_model=8, n_layers=1,
                               n_heads=2, n_modes=4, regressor_width=8, latent_resolution=8)
        assert not wrap_ddp(plain, torch.device("cpu")).find_unused_parameters
        assert not wrap_ddp(band, torch.device("cpu")).find_unused_parameters
        ddp = wrap_ddp(extra, torch.device("cpu"))
        assert ddp.find_unused_parameters
        for _ in range(2):  # the extra variable's encoding is unused: DDP copes because it searches
            ddp(torch.randn(2, 2, 8, 8)).square().mean().backward()
        wrapped = wrap_ddp(band, torch.device("cpu"))
        for _ in range(2):  # band-limited regressor: every parameter used, no search needed
            wrapped(torch.randn(2, 1, 8, 8)).square().mean().backward()
        assert all(p.grad is not None for p in band.parameters())
    finally:
        dist.destroy_process_group()

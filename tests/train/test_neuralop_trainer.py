"""neuraloperator's own Trainer trains sciattn operators unchanged (it calls ``model(**sample)``)."""

from __future__ import annotations

import pytest
import torch
from neuralop.losses import LpLoss
from neuralop.training import Trainer
from torch.utils.data import DataLoader, Dataset

from sciattn.operators import create_operator
from sciattn.pde_data.darcy import generate_darcy


class _Dicts(Dataset):
    def __init__(self, a, u):
        self.a, self.u = torch.as_tensor(a)[:, None].float(), torch.as_tensor(u)[:, None].float()

    def __len__(self):
        return len(self.a)

    def __getitem__(self, i):
        return {"x": self.a[i], "y": self.u[i]}


@pytest.mark.parametrize(
    "name, config",
    [
        ("galerkin_transformer", dict(in_channels=1, out_channels=1, d_model=16, n_layers=1, n_heads=2,
                                      regressor_width=8, n_modes=4)),
        ("mano", dict(in_channels=1, out_channels=1, width=16, n_layers=1, n_heads=2, window=4)),
    ],
)
def test_neuralop_trainer_reduces_the_loss(name, config, tmp_path):
    torch.manual_seed(0)
    data = generate_darcy(24, [16], seed=3)
    a, u = data[16]
    scale = float(abs(u).max())
    train = DataLoader(_Dicts(a[:16], u[:16] / scale), batch_size=4, shuffle=True)
    test = DataLoader(_Dicts(a[16:], u[16:] / scale), batch_size=4)
    model = create_operator(name, **config)
    loss = LpLoss(d=2, p=2)

    def test_error():
        model.eval()
        with torch.no_grad():
            return sum(loss(model(**b), b["y"]).item() for b in test)

    before = test_error()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    trainer = Trainer(model=model, n_epochs=4, device="cpu", verbose=False)
    trainer.train(
        train_loader=train,
        test_loaders={"16": test},
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.StepLR(optimizer, step_size=100),
        training_loss=loss,
        eval_losses={"l2": loss},
        save_dir=str(tmp_path),
    )
    assert test_error() < 0.9 * before

"""A small model trained with DistributedDataParallel over remora ends where the same
run over gloo ends.

Run under torchrun (tests/torch/test_torch_backend.py does):
    python -m torch.distributed.run --nproc-per-node 2 tests/torch/ddp_check.py [STEPS]
The default group is remora; a gloo group over the same ranks trains an identical
copy of the model on the same data, in lockstep. At the end every parameter of the
two copies must agree to float tolerance, and the remora copy must be identical on
every rank. One copy also runs with a communication hook (futures), as DDP users do.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


def model() -> torch.nn.Module:
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 4))


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    dist.init_process_group("remora")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(list(range(world)), backend="gloo")
    torch.set_num_threads(1)

    # small buckets, so that several allreduces are in flight per step
    with_remora = DDP(model(), bucket_cap_mb=0.01)
    with_gloo = DDP(model(), process_group=gloo, bucket_cap_mb=0.01)
    hooked = DDP(model(), bucket_cap_mb=0.01)
    hooked.register_comm_hook(None, default_hooks.allreduce_hook)  # averages through Work futures
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (with_remora, with_gloo, hooked)]

    gen = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        for m, opt in zip((with_remora, with_gloo, hooked), opts):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()

    worst = 0.0
    for a, b, c in zip(with_remora.parameters(), with_gloo.parameters(), hooked.parameters()):
        worst = max(worst, (a - b).abs().max().item(), (a - c).abs().max().item())
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
        # the remora copy is identical on every rank
        gathered = [torch.empty_like(a) for _ in range(world)]
        dist.all_gather(gathered, a.detach().contiguous())
        for g in gathered:
            assert torch.equal(g, gathered[0]), "ranks disagree on a parameter"
    moved = max((p.detach() - q).abs().max().item() for p, q in zip(with_remora.parameters(), model().parameters()))
    assert moved > 1e-3, "training did not change the parameters"
    print(f"rank {rank}: ddp ok: {steps} steps, max |remora - gloo| = {worst:.3g}, moved {moved:.3g}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

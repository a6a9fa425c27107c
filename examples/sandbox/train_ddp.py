"""Train a small model with torch DDP (gloo, CPU) across two PyTorchJob pods, through upstream's
kubeflow-training SDK, on a local kto whose nodes run pods as processes (docs/sandbox.md):

    kto up --runtime process &                       # prints: ready kubeconfig=… bootstrap=…
    python examples/sandbox/train_ddp.py .kto/kubeconfig
"""

import sys

from kubeflow.training import TrainingClient


def train_func():
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 256).unsqueeze(1)
    y = 3 * x - 1 + 0.05 * torch.randn_like(x)
    xs, ys = x[rank::world], y[rank::world]  # each rank its own half of the data
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(10):
        optimiser.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xs), ys)
        loss.backward()  # the gradients are all-reduced across the ranks
        optimiser.step()
        print(f"rank {rank}/{world} epoch {epoch} loss {loss.item():.5f}", flush=True)
    print(f"rank {rank}/{world} y = {model.module.weight.item():.3f} x + {model.module.bias.item():.3f}")
    dist.destroy_process_group()


def main(kubeconfig: str) -> None:
    client = TrainingClient(config_file=kubeconfig, context="kto-1")
    client.create_job(name="ddp-demo", train_func=train_func, num_workers=2, num_procs_per_worker=1)
    client.wait_for_job_conditions("ddp-demo", wait_timeout=300, polling_interval=2)
    logs, _ = client.get_job_logs("ddp-demo", is_master=False)
    for pod, text in sorted(logs.items()):
        print(f"--- {pod}")
        print(text, end="")
    client.delete_job("ddp-demo")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".kto/kubeconfig")

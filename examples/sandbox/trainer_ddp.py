"""The same DDP training as train_ddp.py, as a Kubeflow Trainer v2 TrainJob through the `kubeflow`
SDK's TrainerClient (docs/trainer-v2.md, "The kubeflow SDK"): two nodes of upstream's
torch-distributed runtime, each running the function through torchrun, on a local kto whose nodes
run pods as processes:

    kto up --runtime process &                       # prints: ready kubeconfig=… bootstrap=…
    python examples/sandbox/trainer_ddp.py .kto/kubeconfig    # train_func comes from train_ddp.py beside it
"""

import sys

from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer import CustomTrainer, TrainerClient

from train_ddp import train_func


def main(kubeconfig: str) -> None:
    client = TrainerClient(KubernetesBackendConfig(config_file=kubeconfig, context="kto-1"))
    name = client.train(runtime="torch-distributed", trainer=CustomTrainer(func=train_func, num_nodes=2))
    client.wait_for_job_status(name, timeout=300)
    for step in ("node-0", "node-1"):
        print(f"--- {step}")
        for line in client.get_job_logs(name, step=step):
            print(line)
    client.delete_job(name)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".kto/kubeconfig")

"""A stand-in PyTorchJob replica for launcher tests: prints its environment as the real trainer
parses it; rank 2 fails with --fail, everybody else then waits for a long time."""

import sys
import time

from training.pytorchjob import parse_dist_env

env = parse_dist_env()
print(
    f"rank {env.rank} of {env.world_size} up, master {env.master_addr}:{env.master_port}",
    flush=True,
)
if env.rank == 2 and "--fail" in sys.argv:
    print("simulated crash in rank 2", flush=True)
    sys.exit(3)
if "--fail" in sys.argv:
    time.sleep(300)

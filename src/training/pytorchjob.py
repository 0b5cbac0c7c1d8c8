"""The PyTorchJob replica's environment, as the Kubeflow training operator v1.9.4 sets it.

The operator (``pkg/controller.v1/pytorch/envvar.go``) gives every pod of a PyTorchJob with a
``Master`` replica:

* ``MASTER_ADDR``: the Master's headless Service (``<job>-master-0``), where rank 0 listens;
* ``MASTER_PORT``: the Master container's ``pytorchjob-port`` (23456 in our manifests);
* ``WORLD_SIZE``: every replica, the Master included (1 Master + N Workers: N + 1);
* ``RANK``: 0 for the Master, ``1..N`` for Workers ``0..N-1``.

A Worker-only job gets none of them, so a replica requires all four. No torch import here: the
local launcher (:mod:`training.launcher`) builds the same environment for processes on
loopback, and :mod:`training.torch_train` parses it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fmnist_common.cli import ConfigError

ENV_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
MASTER_PORT = 23456  # the manifests' pytorchjob-port
REPLICA_TYPES = ("master", "worker")  # lower-case, as the operator names the pods


class DistEnvError(ConfigError):
    """``MASTER_ADDR`` / ``MASTER_PORT`` / ``WORLD_SIZE`` / ``RANK`` missing or invalid."""


@dataclass(frozen=True)
class DistEnv:
    """One replica's place in the job: ``rank`` 0 is the Master."""

    master_addr: str
    master_port: int
    world_size: int
    rank: int

    @property
    def is_master(self) -> bool:
        return self.rank == 0


def parse_dist_env(environ: dict[str, str] | None = None) -> DistEnv:
    """Read and check the four variables.

    Args:
        environ: the environment (default ``os.environ``).

    Returns:
        The replica's :class:`DistEnv`.

    Raises:
        DistEnvError: a variable is missing (the job has no Master), or invalid: an empty
            address, a port outside 1..65535, ``WORLD_SIZE`` < 1, ``RANK`` outside
            ``0..WORLD_SIZE-1``, or a value that is not an integer. One line naming the variable.
    """
    env = os.environ if environ is None else environ
    missing = [name for name in ENV_VARS if not env.get(name, "").strip()]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise DistEnvError(
            f"{', '.join(missing)} {verb} not set: the Kubeflow training operator sets "
            "MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK on every replica of a PyTorchJob "
            "with a Master replica (a Worker-only job gets none); locally: "
            "python -m training.launcher --job pytorchjob"
        )

    def integer(name: str, low: int, high: int | None, what: str) -> int:
        text = env[name].strip()
        try:
            value = int(text)
        except ValueError:
            raise DistEnvError(f"{name}={text!r} is not an integer ({what})") from None
        if value < low or (high is not None and value > high):
            span = f"{low}..{high}" if high is not None else f"at least {low}"
            raise DistEnvError(f"{name}={value} is out of range ({what}: {span})")
        return value

    port = integer("MASTER_PORT", 1, 65535, "the rendezvous port")
    world = integer("WORLD_SIZE", 1, None, "the number of replicas, Master included")
    rank = integer("RANK", 0, world - 1, f"this replica's rank with WORLD_SIZE={world}")
    return DistEnv(env["MASTER_ADDR"].strip(), port, world, rank)


def make_dist_env(master_addr: str, master_port: int, world_size: int, rank: int) -> dict:
    """The four variables for one replica, as strings (what the operator writes in the pod)."""
    return {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(world_size),
        "RANK": str(rank),
    }

"""Data-parallel scoring: every process of a launch (torchrun, accelerate launch) scores
its share of each chunk of solutions, and the shares are merged back into input order on
every process, so the results are those of one process (the same batching rules; each
solution's score does not depend on its batch beyond float rounding).

    torchrun --nproc_per_node 8 -m prmkit.cli.score --model runs/prm/model \\
        --input samples.jsonl -o scored.jsonl      # one GPU per process; rank 0 writes
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DataParallel:
    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environment(cls) -> DataParallel:
        """The launch's processes (accelerate's PartialState: NCCL on GPUs, gloo on CPU);
        one process when not launched."""
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return cls()
        import torch
        from accelerate import PartialState

        state = PartialState(cpu=not torch.cuda.is_available())
        return cls(state.process_index, state.num_processes)

    @property
    def device(self):
        """This process's device: its own GPU when there are GPUs, else the CPU."""
        import torch

        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return torch.device("cpu")

    def barrier(self) -> None:
        if self.world > 1:
            from accelerate import PartialState

            PartialState().wait_for_everyone()

    def close(self, wait: bool = True) -> None:
        """End the process group (after waiting for every process, unless this one is
        failing): a gloo group left open at exit can abort a process ("terminate called
        without an active exception")."""
        if self.world > 1:
            from accelerate import PartialState

            if wait:
                PartialState().wait_for_everyone()
            PartialState().destroy_process_group()

    def map(self, items: Sequence[Any], fn: Callable[[Sequence[Any]], list[Any]]) -> list[Any]:
        """fn over items, split round-robin over the processes; results in input order,
        on every process."""
        if self.world == 1:
            return fn(items)
        from accelerate.utils import gather_object

        indices = list(range(self.rank, len(items), self.world))
        mine = fn([items[i] for i in indices])
        parts = gather_object([list(zip(indices, mine, strict=True))])
        out: list[Any] = [None] * len(items)
        for part in parts:
            for i, result in part:
                out[i] = result
        return out

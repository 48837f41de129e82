"""What a data-parallel run (num_gpus > 1) must satisfy to have the maths of one process. No torch
here: the job service checks these before queueing, the engine again at launch
(training/distributed.py).

- batch_size divides by the number of ranks: each rank takes an equal, contiguous slice of every
  global batch (a tail batch smaller than the world leaves some ranks an empty slice, which
  adds nothing).
- lora_dropout is 0: peft draws the dropout masks from each process's own torch RNG, seeded the
  same on every rank, for the rank's slice only. Rank 1's samples would get the masks that rank 0's
  samples get (the first rows of the batch) instead of the masks one process draws for its later
  rows: correlated dropout across ranks, a different run. Drawing the global batch's masks and
  slicing them would need the engine's own dropout layer; until then it is refused.
"""

from __future__ import annotations

from lorastudio.errors import FieldProblem


def data_parallel_problems(world_size: int, batch_size: int, lora_dropout: float) -> list[FieldProblem]:
    """Why a run of `world_size` ranks with these settings cannot be exact (empty: it can).
    Takes the number of ranks (num_gpus), the global batch_size and lora_dropout."""
    if world_size <= 1:
        return []
    problems = []
    if batch_size % world_size:
        problems.append(
            FieldProblem(
                "batch_size",
                f"{batch_size} does not divide by the {world_size} processes of the run: "
                "each process takes an equal slice of every batch",
            )
        )
    if lora_dropout > 0:
        problems.append(
            FieldProblem(
                "lora_dropout",
                f"{lora_dropout} is not supported with num_gpus={world_size}: every process would "
                "draw the same dropout masks for its slice of the batch (not the masks of one "
                "process); set lora_dropout to 0 or num_gpus to 1",
            )
        )
    return problems

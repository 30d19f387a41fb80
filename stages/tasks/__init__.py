"""The algorithmic tasks (registered in stages.params.TASKS), their generators and deterministic datasets."""
from stages.tasks.registry import LEVELS, TASKS, Task, get_task
from stages.tasks.dataset import build_dataset

__all__ = ["LEVELS", "TASKS", "Task", "get_task", "build_dataset"]

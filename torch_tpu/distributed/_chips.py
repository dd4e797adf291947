"""Which chip a process uses under torchrun.

torchrun starts one process per chip and sets ``LOCAL_RANK``. When the
process has that many chips (``TORCH_TPU_CHIPS``), process ``LOCAL_RANK``
uses ``tpu:LOCAL_RANK``; otherwise (one chip per process, the virtual TPU's
default) every process uses its own ``tpu:0``. This happens when the
process group is created (``init_process_group``), on the calling thread,
unless the program already chose a chip other than 0 with
``torch.tpu.set_device``; a program that wants another chip calls
``torch.tpu.set_device`` after ``init_process_group``, as with CUDA.
"""
import os
from typing import Optional

import torch


def local_chip() -> Optional[int]:
    """The chip this process should use under torchrun, or None outside it."""
    local = os.environ.get("LOCAL_RANK")
    if local is None:
        return None
    try:
        index = int(local)
    except ValueError:
        return None
    return index if 0 <= index < torch.tpu.device_count() else 0


def select_chip() -> None:
    index = local_chip()
    if index is not None and index != 0 and torch.tpu.current_device() == 0:
        torch.tpu.set_device(index)

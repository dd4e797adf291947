"""torch.distributed for tpu: the ``tpu_dist`` c10d backend.

``install()`` (run when torch_tpu is imported) registers the backend with
c10d under the name ``tpu_dist`` and as the default for the ``tpu`` device,
so that ``init_process_group()`` with no backend, ``"tpu_dist"`` or
``"cpu:gloo,tpu:tpu_dist"`` all pick it, as ``nccl`` is picked for cuda.
Nothing heavier than the registration happens at import: the process group
(``process_group.ProcessGroupTPU``) is imported when the first group is
created. See docs/distributed.md.
"""
from typing import Any

BACKEND_NAME = "tpu_dist"


def _create_backend(dist_backend_opts: Any, backend_options: Any = None) -> Any:
    """c10d's creator for ``tpu_dist`` (``extended_api=True``)."""
    from torch_tpu.distributed._chips import select_chip
    from torch_tpu.distributed.process_group import ProcessGroupTPU

    select_chip()
    return ProcessGroupTPU(
        dist_backend_opts.store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        dist_backend_opts.timeout,
        group_name=str(dist_backend_opts.group_id),
    )


def install() -> None:
    """Register ``tpu_dist`` with c10d (idempotent; a no-op without c10d)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    Backend = dist.Backend
    if BACKEND_NAME.upper() in Backend._plugins:
        return
    # The group also serves cpu tensors (object collectives, metadata), so
    # "tpu_dist" alone covers both; the cpu default stays gloo.
    Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "tpu"])
    Backend.default_device_backend_map["tpu"] = BACKEND_NAME


def __getattr__(name: str) -> Any:
    if name == "ProcessGroupTPU":
        from torch_tpu.distributed.process_group import ProcessGroupTPU

        return ProcessGroupTPU
    if name == "local_chip":
        from torch_tpu.distributed._chips import local_chip

        return local_chip
    raise AttributeError(f"module 'torch_tpu.distributed' has no attribute {name!r}")

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


def _bind_device_id(helper: Any) -> Any:
    """c10d's ``_new_process_group_helper``, then: a tpu_dist group made
    with ``device_id=torch.device("tpu", i)`` is bound to that chip
    (``bound_device_id``, which c10d sets on the ProcessGroup object that a
    Python backend replaces) and the chip becomes the current one, as the
    device a program names wins over the LOCAL_RANK choice."""

    def new_group_helper(*args: Any, **kwargs: Any) -> Any:
        result = helper(*args, **kwargs)
        device_id = kwargs.get("device_id")
        pg = result[0] if isinstance(result, tuple) else result
        if getattr(device_id, "type", None) == "tpu" and type(pg).__name__ == "ProcessGroupTPU":
            import torch

            pg.bound_device_id = device_id
            torch.tpu.set_device(device_id.index)
        return result

    return new_group_helper


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
    from torch.distributed import distributed_c10d

    from torch_tpu._import_hooks import replace

    replace(distributed_c10d, "_new_process_group_helper", _bind_device_id)


def __getattr__(name: str) -> Any:
    if name == "ProcessGroupTPU":
        from torch_tpu.distributed.process_group import ProcessGroupTPU

        return ProcessGroupTPU
    if name == "local_chip":
        from torch_tpu.distributed._chips import local_chip

        return local_chip
    raise AttributeError(f"module 'torch_tpu.distributed' has no attribute {name!r}")

"""Build and load the fused CPU box-attention kernels (``csrc/``) on first use.

Why our own kernel: with head dimensions of 16 to 32, PyTorch's fused CPU SDPA spends most of its time
per score on the softmax bookkeeping, not on the two dot products, and runs at about 30% of the fp32 matmul
rate whatever the block shape; the physical pyramid's boxes also need per-query window weights that SDPA can
only take as a materialised mask. The kernel computes the scores of one query against its box as a loop over
keys that the compiler vectorises, with the window weights from the per-axis tables of
:mod:`sciattn.multipole.geometry` (``benchmarks/multipole_scaling`` measures both paths).

The extension is compiled with the C++ compiler PyTorch finds (``torch.utils.cpp_extension.load``, ninja) for
this machine's instruction set, once per machine and torch version, into PyTorch's extension cache. Nothing here
raises: where it cannot be built (no compiler, no ninja, ``SCIATTN_CPU_KERNELS=0``) :func:`load` returns
``None`` and :func:`why_not` says why, and the layer runs its pure-PyTorch path instead.

Concurrent first uses (several processes, e.g. test workers or ranks) build once: the build runs under an
exclusive ``flock`` on a file beside the build folder, which the operating system releases when its holder dies.
PyTorch's own marker (a ``lock`` file in the build folder, which a build killed part-way leaves behind and which
makes every later process wait for ever) is therefore stale whenever it is found under that lock, and removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import sys
import threading
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: PyTorch's own marker alone serialises builds
    fcntl = None

__all__ = ["load", "why_not", "ENV_SWITCH"]

ENV_SWITCH = "SCIATTN_CPU_KERNELS"
_SOURCES = sorted(Path(__file__).with_name("csrc").glob("*.cpp"))
_HEADERS = sorted(Path(__file__).with_name("csrc").glob("*.h"))
_lock = threading.Lock()
_state: dict[str, object] = {}


def _machine_tag() -> str:
    """A short hash of the source, the CPU's flags and torch's version: a kernel built with ``-march=native``
    on one machine is never loaded on another."""
    import torch

    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features", "model name")):
                    flags += line
                if line.strip() == "":
                    break
    except OSError:
        flags = platform.processor()
    h = hashlib.sha256()
    for part in (*(f.read_bytes() for f in _SOURCES + _HEADERS), flags.encode(), torch.__version__.encode(),
                 platform.machine().encode()):
        h.update(part)
    return h.hexdigest()[:12]


def _build_directory(name: str) -> Path:
    """PyTorch's extension cache folder for ``name`` (``TORCH_EXTENSIONS_DIR`` or its default root), CPU build."""
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    return root / f"py{sys.version_info.major}{sys.version_info.minor}_cpu" / name


@contextlib.contextmanager
def build_lock(directory: Path):
    """Hold an exclusive ``flock`` on ``<directory>.flock`` (created with ``directory``'s parent) and remove a
    ``lock`` marker left in ``directory`` by a build that was killed: under this lock no other build is running."""
    directory.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield
        return
    with open(directory.with_name(directory.name + ".flock"), "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            (directory / "lock").unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _disabled() -> str | None:
    value = os.environ.get(ENV_SWITCH, "").strip().lower()
    if value in ("0", "false", "off", "no"):
        return f"disabled by {ENV_SWITCH}={os.environ[ENV_SWITCH]}"
    return None


def load():
    """The registered operator namespace (``torch.ops.<name>``: ``box_forward``, ``box_backward``), or ``None``
    where the kernel cannot be built."""
    if "module" in _state:
        return _state["module"]
    reason = _disabled()
    if reason is not None:
        return None  # read on every call: the switch can be flipped in a running process
    with _lock:
        if "module" in _state:
            return _state["module"]
        module, why = None, None
        try:
            from torch.utils.cpp_extension import load as build

            flags = ["-O3", "-ffp-contract=fast", "-fopenmp"]
            if platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64"):
                flags.append("-march=native" if platform.machine() in ("x86_64", "AMD64") else "-mcpu=native")
            import torch

            name = f"sciattn_box_{_machine_tag()}"
            directory = _build_directory(name)
            with build_lock(directory):
                build(name=name, sources=[str(f) for f in _SOURCES],
                      extra_cflags=[*flags, f"-DSCIATTN_LIBRARY={name}"], extra_ldflags=["-fopenmp"],
                      build_directory=str(directory), is_python_module=False, verbose=False)
            module = getattr(torch.ops, name)
        except Exception as err:  # no compiler, no ninja, a failed build: the pure-PyTorch path runs instead
            why = f"the CPU kernel could not be built ({type(err).__name__}: {str(err).strip().splitlines()[-1:]})"
        _state["module"], _state["why"] = module, why
        return module


def why_not() -> str | None:
    """Why :func:`load` gives ``None`` (``None`` when the kernel is available)."""
    reason = _disabled()
    if reason is not None:
        return reason
    load()
    return _state.get("why")  # type: ignore[return-value]

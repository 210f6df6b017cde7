"""Build and load a family's fused CPU kernels (C++ sources in its ``csrc/`` folder) on first use.

Each family with CPU kernels (``sciattn.multipole``, ``sciattn.neighborhood``) owns one :class:`CpuExtension`.
The sources, the shared headers of ``sciattn/csrc/`` and the machine are hashed into the library's name, and the
library is compiled with the C++ compiler PyTorch finds (``torch.utils.cpp_extension.load``, ninja) for this
machine's instruction set, once per machine, source and torch version, into PyTorch's extension cache. Its
operators are registered under that name (``torch.ops.<name>``), passed to the sources as ``SCIATTN_LIBRARY``.

Nothing here raises: where a library cannot be built (no compiler, no ninja, ``SCIATTN_CPU_KERNELS=0``)
:meth:`CpuExtension.load` returns ``None`` and :meth:`CpuExtension.why_not` says why; the family then runs its
pure-PyTorch path.

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

__all__ = ["CpuExtension", "build_lock", "unit_stride_rows", "ENV_SWITCH", "SHARED_HEADERS"]

ENV_SWITCH = "SCIATTN_CPU_KERNELS"
SHARED_HEADERS = Path(__file__).with_name("csrc")


def _cpu_flags() -> str:
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
    return flags


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


def disabled() -> str | None:
    """Why the fused CPU kernels are switched off by ``SCIATTN_CPU_KERNELS`` (read on every call), or None."""
    value = os.environ.get(ENV_SWITCH, "").strip().lower()
    if value in ("0", "false", "off", "no"):
        return f"disabled by {ENV_SWITCH}={os.environ[ENV_SWITCH]}"
    return None


def unit_stride_rows(t):
    """``t`` itself when its last axis is unit-stride (or of size 1): the kernels read any other strides in place,
    e.g. heads split from a token-major projection; else a contiguous copy."""
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


class CpuExtension:
    """The fused CPU kernels of one family: the C++ sources of ``sources`` (a ``csrc/`` folder) built into one
    library named ``<prefix>_<hash>``."""

    def __init__(self, prefix: str, sources: Path) -> None:
        self.prefix = prefix
        self.sources = sorted(sources.glob("*.cpp"))
        self.headers = sorted(sources.glob("*.h")) + sorted(SHARED_HEADERS.glob("*.h"))
        self._lock = threading.Lock()
        self._state: dict[str, object] = {}

    def machine_tag(self) -> str:
        """A short hash of the sources, the CPU's flags and torch's version: a kernel built with ``-march=native``
        on one machine is never loaded on another."""
        import torch

        h = hashlib.sha256()
        for part in (*(f.read_bytes() for f in self.sources + self.headers), _cpu_flags().encode(),
                     torch.__version__.encode(), platform.machine().encode()):
            h.update(part)
        return h.hexdigest()[:12]

    def load(self):
        """The registered operator namespace (``torch.ops.<name>``), or ``None`` where it cannot be built."""
        if "module" in self._state:
            return self._state["module"]
        if disabled() is not None:
            return None  # read on every call: the switch can be flipped in a running process
        with self._lock:
            if "module" in self._state:
                return self._state["module"]
            module, why = None, None
            try:
                import torch
                from torch.utils.cpp_extension import load as build

                flags = ["-O3", "-ffp-contract=fast", "-fopenmp"]
                if platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64"):
                    flags.append("-march=native" if platform.machine() in ("x86_64", "AMD64") else "-mcpu=native")
                name = f"{self.prefix}_{self.machine_tag()}"
                directory = _build_directory(name)
                with build_lock(directory):
                    build(name=name, sources=[str(f) for f in self.sources],
                          extra_cflags=[*flags, f"-DSCIATTN_LIBRARY={name}"], extra_ldflags=["-fopenmp"],
                          extra_include_paths=[str(SHARED_HEADERS)], build_directory=str(directory),
                          is_python_module=False, verbose=False)
                module = getattr(torch.ops, name)
            except Exception as err:  # no compiler, no ninja, a failed build: the pure-PyTorch path runs instead
                why = f"the CPU kernel could not be built ({type(err).__name__}: {str(err).strip().splitlines()[-1:]})"
            self._state["module"], self._state["why"] = module, why
            return module

    def why_not(self) -> str | None:
        """Why :meth:`load` gives ``None`` (``None`` when the kernels are available)."""
        reason = disabled()
        if reason is not None:
            return reason
        self.load()
        return self._state.get("why")  # type: ignore[return-value]

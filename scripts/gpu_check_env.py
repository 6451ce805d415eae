"""The machine ``scripts/gpu_check.sh`` runs on, one fact a line (``name: value``): the GPUs as nvidia-smi
and torch see them, the versions of the stack (and where each is imported from: the image or the
wheelhouse's /tmp/xbm-site), the CPUs, /dev/shm and Python. A missing piece is a line that says so, never
an error: this part must run on any machine.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

PACKAGES = ("torch", "torchvision", "timm", "pytorch-metric-learning", "ray", "optuna", "cmaes", "tensorboardX",
            "pydantic", "typing-extensions", "numpy", "pandas", "pyarrow", "faiss-cpu", "scikit-learn", "pytest",
            "pytest-xdist")
MODULES = {"pytorch-metric-learning": "pytorch_metric_learning", "typing-extensions": "typing_extensions",
           "faiss-cpu": "faiss", "scikit-learn": "sklearn", "pytest-xdist": "xdist"}


def line(name: str, value) -> None:
    print(f"{name}: {value}", flush=True)


def nvidia_smi() -> None:
    if shutil.which("nvidia-smi") is None:
        line("nvidia-smi", "not found (no NVIDIA driver here)")
        return
    query = "index,name,driver_version,memory.total,memory.used,utilization.gpu,compute_cap"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except subprocess.TimeoutExpired:
        line("nvidia-smi", "did not answer in 20 s")
        return
    rows = out.stdout.strip().splitlines() or [out.stderr.strip() or f"exit status {out.returncode}"]
    for row in rows:
        line("GPU (nvidia-smi: index, name, driver, memory total, used, utilisation, compute capability)", row)


def torch_view() -> None:
    try:
        import torch
    except Exception as exc:  # the check goes on without it
        line("torch", f"cannot be imported: {type(exc).__name__}: {exc}")
        return
    line("torch CUDA", f"available={torch.cuda.is_available()}, built for CUDA {torch.version.cuda}, "
                       f"cuDNN {torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}")
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        line(f"torch cuda:{i}", f"{p.name}, {p.total_memory / 2**30:.1f} GiB, compute capability {p.major}.{p.minor}, "
                                f"bf16 {torch.cuda.is_bf16_supported()}")


def versions() -> None:
    for name in PACKAGES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            line(name, "MISSING")
            continue
        spec = importlib.util.find_spec(MODULES.get(name, name))
        where = "?"
        if spec is not None and spec.origin:  # a package's folder's parent, or a module file's folder
            where = os.path.dirname(spec.origin if spec.submodule_search_locations is None
                                    else os.path.dirname(spec.origin))
        line(name, f"{version} ({where})")


def machine() -> None:
    line("python", f"{sys.version.split()[0]} ({sys.executable})")
    line("platform", platform.platform())
    cpus = len(os.sched_getaffinity(0))
    try:
        from xbm.runtime.cpus import available_cpus  # the project's count: the affinity mask and the cgroup quota

        line("CPUs", f"{available_cpus()} for this process (affinity {cpus}, machine {os.cpu_count()})")
    except Exception:
        line("CPUs", f"affinity {cpus}, machine {os.cpu_count()}")
    if os.path.isdir("/dev/shm"):
        usage = shutil.disk_usage("/dev/shm")
        line("/dev/shm", f"{usage.total / 2**30:.1f} GiB, {usage.free / 2**30:.1f} GiB free")
    else:
        line("/dev/shm", "absent")
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        line("memory", f"{pages / 2**30:.0f} GiB")
    except (ValueError, OSError):
        pass
    line("PYTHONPATH", os.environ.get("PYTHONPATH", ""))


def nmi_kmeans() -> None:
    """Which k-means the evaluation's ``nmi`` clusters with here, proven by a small ``nmi`` through the project's
    own path (and on CUDA embeddings, which take the device path, when CUDA is present): faiss-cpu's when it
    imports (a wheel built against another numpy may not), else scikit-learn's, 5-16x slower. Without this
    line a run's ``nmi`` figures cannot say which they measured."""
    try:
        import torch
        from xbm.evaluate import knn as knn_search
        from xbm.evaluate.metrics import nmi

        x = torch.nn.functional.normalize(torch.randn(400, 16, generator=torch.Generator().manual_seed(0)), dim=1)
        labels = torch.arange(400) % 8
        ran = f"a 400 x 16 nmi ran ({nmi(x, labels):.3f})"
        if torch.cuda.is_available():
            ran += f", on cuda ({nmi(x.cuda(), labels.cuda()):.3f})"
    except Exception as exc:  # the check goes on without it
        line("nmi k-means", f"fails: {type(exc).__name__}: {exc}")
        return
    faiss = knn_search.faiss
    backend = (f"faiss {getattr(faiss, '__version__', '?')} (its C++ k-means on CPU embeddings, its Python loop "
               f"over a torch assignment on CUDA ones)" if faiss is not None
               else "scikit-learn's (faiss cannot be imported: about 5-16x slower)")
    line("nmi k-means", f"{backend}; {ran}")


if __name__ == "__main__":
    nvidia_smi()
    torch_view()
    versions()
    machine()
    nmi_kmeans()

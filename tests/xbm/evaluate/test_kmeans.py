"""``nmi``'s k-means where the embeddings are (xbm/evaluate/kmeans.py): faiss's C++ one on the CPU, faiss's
Python loop over a torch assignment elsewhere. The device path runs here on CPU tensors: the same code a GPU runs."""
import functools
import importlib.util
from pathlib import Path

import pytest
import torch
from pytorch_metric_learning.utils.inference import FaissKMeans
from sklearn.metrics import normalized_mutual_info_score

from xbm.evaluate import kmeans as kmeans_module
from xbm.evaluate import knn as knn_module
from xbm.evaluate.kmeans import DeviceAssign, device_kmeans, kmeans_for
from xbm.evaluate.metrics import nmi
from xbm.normalisers import stats

from ..conftest import needs_cuda

needs_faiss = pytest.mark.skipif(knn_module.faiss is None, reason="needs faiss")
# the benchmark's data (benchmarks/bench_nmi.py): unit vectors around class centres on the sphere
_spec = importlib.util.spec_from_file_location("bench_nmi", Path(__file__).parents[3] / "benchmarks" / "bench_nmi.py")
bench_nmi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_nmi)
clustered = bench_nmi.clustered


@pytest.mark.parametrize("dense", [False, True])   # the CPU's index_add_; the one-hot product a GPU takes
@pytest.mark.parametrize("block_elements", [2**25, 2])   # one block; one row per block
def test_device_assignment_and_sums_match_a_hand_computation(monkeypatch, block_elements, dense):
    """Bug caught: the cross term's factor or sign wrong, |c|^2 left out (which favours the shortest centroid),
    a block boundary dropping or repeating rows, means handed to faiss, which divides the sums by the counts,
    or the GPU's one-hot sums adding rows to the wrong centroid."""
    monkeypatch.setattr(kmeans_module, "ASSIGN_ELEMENTS", block_elements)
    monkeypatch.setattr(kmeans_module, "sum_by_group", functools.partial(stats.sum_by_group, dense=dense))
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0], [11.0, 1.0], [4.0, 0.0]])
    centroids = torch.tensor([[0.5, 0.0], [10.0, 0.0]])
    # squared distances: row 0: 0.25 | 100; row 1: 0.25 | 81; row 2: 90.25 | 0; row 3: 111.25 | 2;
    # row 4: 12.25 | 36 (nearer the first centroid, though the second is longer: |c|^2 matters)
    assigned, distances, sums = DeviceAssign(x).assign_to(centroids)
    assert assigned.tolist() == [0, 0, 1, 1, 0]
    torch.testing.assert_close(distances, torch.tensor([0.25, 0.25, 0.0, 2.0, 12.25]))
    torch.testing.assert_close(sums, torch.tensor([[5.0, 0.0], [21.0, 1.0]]))


@needs_faiss
def test_device_kmeans_clusters_as_faiss_cpp_does():
    """Bug caught: a device path that clusters worse than (or differently from) the CPU's faiss: an nmi that
    moves when a run goes from the CPU to a GPU. The two k-means draw their initial centroids from different
    random streams, so one seed's NMI differs by up to ~0.02 from path to path (as from seed to seed); over four
    seeds their means agree within 0.01 (measured: 0.002 apart here, 0.003-0.006 on two other shapes)."""
    x, labels = clustered(2000, 100, 64, noise=4.0)

    def mean_nmi(cluster) -> float:
        return sum(normalized_mutual_info_score(labels.numpy(), cluster(seed).numpy()) for seed in range(4)) / 4

    device = mean_nmi(lambda seed: device_kmeans(x, 100, seed=seed))
    cpp = mean_nmi(lambda seed: FaissKMeans(seed=seed, min_points_per_centroid=1)(x, 100))
    assert 0.3 < cpp < 0.9   # neither separable nor noise: a comparison that can tell two clusterings apart
    assert device == pytest.approx(cpp, abs=0.01)


@needs_faiss
def test_device_kmeans_is_seeded_and_prints_nothing(capfd):
    """Bug caught: an unseeded k-means (an nmi that changes between identical runs), and faiss 1.15's contrib
    k-means printing "preproc..." at every evaluation into every trial's log."""
    x, _ = clustered(300, 15, 16, noise=3.0)
    first = device_kmeans(x, 15, seed=4)
    assert torch.equal(first, device_kmeans(x, 15, seed=4))
    assert not torch.equal(first, device_kmeans(x, 15, seed=5))
    assert len(first.unique()) == 15   # empty clusters split, as faiss does
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_kmeans_for_picks_by_device_and_faiss(monkeypatch):
    """Bug caught: CUDA embeddings sent to faiss-cpu (copied to the host, clustered on its threads beside the
    loader workers) instead of the device path, or the CPU path changed from faiss's C++ k-means."""
    if knn_module.faiss is not None:
        assert isinstance(kmeans_for(torch.device("cpu"), 0), FaissKMeans)
        assert kmeans_for(torch.device("cuda"), 3).func is device_kmeans
        assert kmeans_for(torch.device("cuda"), 3).keywords == {"seed": 3}
    monkeypatch.setattr(knn_module, "faiss", None)
    for device in ("cpu", "cuda"):
        assert kmeans_for(torch.device(device), 0).func.__name__ == "_sklearn_kmeans"


@needs_faiss
def test_nmi_scores_the_clustering_of_the_k_means_chosen_for_the_embeddings_device(monkeypatch):
    """Bug caught: ``nmi`` choosing its k-means by anything but the embeddings' device (a fixed one), or
    scoring other ids than that k-means gives. A CPU run stands in for a GPU's by being handed the device path."""
    seen = []

    def chosen(device, seed):
        seen.append(device)
        return lambda x, clusters: device_kmeans(x, clusters, seed)

    monkeypatch.setattr("xbm.evaluate.metrics.kmeans_for", chosen)
    x, labels = clustered(500, 25, 32, noise=3.0)
    expected = normalized_mutual_info_score(labels.numpy(), device_kmeans(x, 25, seed=2).numpy())
    assert nmi(x, labels, seed=2) == pytest.approx(expected, abs=1e-12)
    assert seen == [x.device]


@needs_cuda
@needs_faiss
def test_nmi_of_cuda_embeddings_clusters_on_the_gpu_as_on_the_cpu(monkeypatch):
    """Bug caught: ``nmi`` copying CUDA embeddings to the host before choosing its k-means (faiss-cpu then
    clusters them), the device path failing on CUDA tensors (numpy indices, the sums' device), or clustering
    differently there than the same code on the CPU (full fp32 on both)."""
    x, labels = clustered(2000, 100, 64, noise=4.0)
    gpu = device_kmeans(x.cuda(), 100, seed=0)
    assert gpu.device.type == "cuda"
    same = normalized_mutual_info_score(gpu.cpu().numpy(), device_kmeans(x, 100, seed=0).numpy())
    assert same > 0.99   # the same clustering up to a few rows on near-ties
    clustered_on = []

    def recorded(x, clusters, seed):
        clustered_on.append(x.device.type)
        return device_kmeans(x, clusters, seed)

    monkeypatch.setattr(kmeans_module, "device_kmeans", recorded)
    assert nmi(x.cuda(), labels.cuda()) == pytest.approx(nmi(x, labels), abs=0.02)
    assert clustered_on == ["cuda"]

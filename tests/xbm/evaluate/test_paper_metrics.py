"""The papers' retrieval-side metrics: ``superclass_top_<k>`` (thesis Table 5.16) and ``nmi``."""
import pytest
import torch
from pytorch_metric_learning.utils.inference import FaissKMeans
from sklearn.metrics import normalized_mutual_info_score

from xbm.evaluate.diagnostics import superclass_mean_top_k
from xbm.evaluate.metrics import nmi


def test_superclass_top_k_counts_nearest_superclass_means_by_hand():
    """Bug caught: the neighbour share (``superclass_neighbour_share``) reported under the thesis's name; means
    taken over classes instead of super-classes, or over the queries when a gallery is given; k off by one."""
    superclass_of = [0, 0, 1, 2]   # classes 0, 1 -> super 0; class 2 -> super 1; class 3 -> super 2
    gallery = torch.tensor([[0.0], [2.0], [10.0], [20.0], [22.0]])
    gallery_labels = torch.tensor([0, 1, 2, 3, 3])
    # means: super 0 at 1.0, super 1 at 10.0, super 2 at 21.0
    query = torch.tensor([[0.5], [9.0], [14.0], [30.0]])
    query_labels = torch.tensor([1, 2, 3, 0])
    # query 0.5 (super 0): nearest 1.0 -> rank 0; 9.0 (super 1): 10 -> rank 0;
    # 14.0 (super 2): 10 (d 4) < 21 (d 7) -> rank 1; 30.0 (super 0): 21 (d 9), 10 (d 20), 1 (d 29) -> rank 2
    out = superclass_mean_top_k(query, query_labels, superclass_of, (1, 2, 3, 4), gallery=gallery,
                                gallery_labels=gallery_labels)
    assert out == {"superclass_top_1": 2 / 4, "superclass_top_2": 3 / 4, "superclass_top_3": 1.0,
                   "superclass_top_4": 1.0}


def test_superclass_top_k_without_gallery_and_a_superclass_without_mean():
    """Bug caught: a query whose super-class has no reference counted as a hit at k >= the number of means
    (it can never be among them); leave-one-out means not taken over the split itself."""
    x = torch.tensor([[0.0], [2.0], [5.0]])
    out = superclass_mean_top_k(x, torch.tensor([0, 0, 1]), [0, 1], (1,))
    # means 1.0 (super 0) and 5.0 (super 1): 0.0 and 2.0 nearest to 1.0, 5.0 to itself
    assert out == {"superclass_top_1": 1.0}
    out = superclass_mean_top_k(x, torch.tensor([0, 0, 2]), [0, 1, 2], (1, 5), gallery=x[:2],
                                gallery_labels=torch.tensor([0, 1]))
    # means 0.0 (super 0), 2.0 (super 1); the query of super 2 has no mean
    assert out == {"superclass_top_1": 1 / 3, "superclass_top_5": 2 / 3}


def test_nmi_is_sklearns_score_of_the_same_seeded_clustering():
    """Bug caught: NMI of a clustering with the wrong number of clusters (not the number of classes), of an
    unseeded k-means (a metric that changes between identical runs), or of labels in another order."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(60) % 5
    x = torch.randn(5, 8, generator=generator)[labels] + 0.8 * torch.randn(60, 8, generator=generator)
    clusters = FaissKMeans(seed=3)(x, 5).numpy()
    assert nmi(x, labels, seed=3) == pytest.approx(normalized_mutual_info_score(labels.numpy(), clusters), abs=1e-12)
    assert nmi(x, labels, seed=3) == nmi(x, labels, seed=3)
    assert 0.0 < nmi(x, labels) <= 1.0


def test_nmi_and_recall_work_where_faiss_is_not_installed(monkeypatch):
    """Bug caught (seen on the H100 image, which has no faiss): ``nmi`` built PML's ``AccuracyCalculator``
    without a k-NN, so PML built its default ``FaissKNN()`` and every evaluation with diagnostics died with
    ``NameError: name 'faiss' is not defined``. Here faiss is hidden from PML and from xbm as it is there."""
    import pytorch_metric_learning.utils.inference as pml_inference
    from sklearn.cluster import KMeans

    import xbm.evaluate.knn as knn_module
    from xbm.evaluate.metrics import retrieval_metrics

    monkeypatch.setattr(knn_module, "faiss", None)
    monkeypatch.delattr(pml_inference, "faiss", raising=False)
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(60) % 5
    x = torch.randn(5, 8, generator=generator)[labels] + 0.8 * torch.randn(60, 8, generator=generator)
    clusters = KMeans(5, random_state=3, n_init=1).fit_predict(x.numpy())  # the fallback's clustering
    assert nmi(x, labels, seed=3) == pytest.approx(normalized_mutual_info_score(labels.numpy(), clusters), abs=1e-12)
    recall = retrieval_metrics(x, labels, ks=(1,), knn="torch")["recall_at_1"]
    assert recall == pytest.approx(float(((x[:, None] - x[None]).norm(dim=2).fill_diagonal_(float("inf"))
                                          .argmin(1).remainder(5) == labels).float().mean()))


def test_nmi_without_faiss_at_scale_says_what_to_do(monkeypatch):
    """Bug caught: a run without faiss at SOP scale spending minutes in scikit-learn's k-means at every
    evaluation with no word why (10,000 x 2,000 took 12.4 s against faiss's 0.76 s on 2 cores)."""
    import xbm.evaluate.knn as knn_module
    from xbm.evaluate import metrics

    monkeypatch.setattr(knn_module, "faiss", None)
    monkeypatch.setattr(metrics, "SLOW_KMEANS_WORK", 59 * 5)
    labels = torch.arange(60) % 5
    x = torch.randn(60, 8, generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning, match="60 embeddings into 5 clusters without faiss.*eval_nmi=false"):
        nmi(x, labels)


@pytest.mark.skipif(__import__("xbm.evaluate.knn", fromlist=["faiss"]).faiss is None, reason="needs faiss")
def test_nmi_prints_nothing_with_few_samples_per_class(capfd):
    """Bug caught: faiss's "please provide at least 39 x k training points" printed to stdout at every
    evaluation (retrieval classes have a handful of samples each), flooding every trial's log."""
    labels = torch.arange(60) % 20
    nmi(torch.randn(60, 8, generator=torch.Generator().manual_seed(0)), labels)
    out, err = capfd.readouterr()
    assert "WARNING" not in out + err

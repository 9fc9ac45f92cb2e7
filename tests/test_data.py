"""harness.data: registry datasets, three disjoint splits, memo, TFDS array_record round trip, fail-fast."""

from __future__ import annotations

import time

import numpy as np
import pytest

from harness import data
from harness.core.builders import hyperparameters
from harness.data import offline, tfds_source
from harness.data.sources import DATASETS, Dataset, load_dataset


def test_registry_names_and_hparams():
    assert set(DATASETS) >= {"digits", "mnist1d", "synthetic"}
    assert list(hyperparameters(DATASETS["digits"])) == ["validation_fraction"]
    assert hyperparameters(DATASETS["digits"])["validation_fraction"].default == 0.2
    # input_shape/num_classes are real dataset hyperparameters (INJECTED only applies to models)
    assert list(hyperparameters(DATASETS["synthetic"], skip=frozenset())) == [
        "num_examples", "num_test", "input_shape", "num_classes", "seed", "num_valid"]
    assert "validation_fraction" in hyperparameters(tfds_source.load_tfds)


def test_digits_values():
    from sklearn.datasets import load_digits

    ds = load_dataset("digits")
    assert isinstance(ds, Dataset)
    assert ds.split_sizes == {"train": 1150, "valid": 287, "test": 360}
    assert ds.x_valid.shape == (287, 8, 8, 1) and ds.x_test.shape == (360, 8, 8, 1)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    assert ds.input_shape == (8, 8, 1) and ds.num_classes == 10
    assert float(ds.x_train.min()) == 0.0 and float(ds.x_train.max()) == 1.0
    # the fixed split: seed-0 permutation, last 360 are test; pixel 0..16 scaled by 1/16
    raw = load_digits()
    perm = np.random.default_rng(0).permutation(1797)
    np.testing.assert_array_equal(ds.y_test, raw.target[perm[-360:]])
    # validation: the last 287 of a seed-0 permutation of the 1,437 non-test images
    inner = np.random.default_rng(0).permutation(1437)
    np.testing.assert_array_equal(ds.y_valid, raw.target[perm[:1437][inner[-287:]]])
    np.testing.assert_array_equal(ds.y_train, raw.target[perm[:1437][inner[:1150]]])
    np.testing.assert_allclose(ds.x_train[0, :, :, 0], raw.images[perm[:1437][inner[0]]] / 16.0,
                               rtol=0, atol=0)
    assert "CC BY 4.0" in ds.license and ds.citation
    # immutable and memoised
    assert load_dataset("digits") is ds
    with pytest.raises(ValueError):
        ds.x_train[0, 0, 0, 0] = 1.0


def _rows(x):
    return {a.tobytes() for a in np.asarray(x)}


def test_splits_disjoint_and_fraction():
    """Train, validation and test never share an example; the fraction sets the carve."""
    for ds in (load_dataset("digits"), load_dataset("digits", validation_fraction=0.1)):
        tr, va, te = _rows(ds.x_train), _rows(ds.x_valid), _rows(ds.x_test)
        assert not (tr & va) and not (tr & te) and not (va & te)
    ds = load_dataset("digits", validation_fraction=0.1)
    assert ds.split_sizes == {"train": 1293, "valid": 144, "test": 360}
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match=r"validation_fraction must be in \(0, 1\)"):
            load_dataset("digits", validation_fraction=bad)
    with pytest.raises(ValueError, match="leaves an empty split of 3 training examples"):
        data.carve_validation(np.zeros((3, 1), np.float32), np.zeros(3, np.int32), 0.01)


def test_unknown_name_did_you_mean():
    with pytest.raises(KeyError, match=r"unknown dataset 'digit'.*did you mean 'digits'"):
        load_dataset("digit")


def test_synthetic_teacher():
    ds = load_dataset("synthetic", num_examples=64, num_test=16, input_shape=(3, 4), num_classes=5, seed=3)
    assert ds.x_train.shape == (64, 3, 4) and ds.x_test.shape == (16, 3, 4)
    assert ds.x_valid.shape == (256, 3, 4)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((80, 3, 4), dtype=np.float32)
    w = rng.standard_normal((12, 5), dtype=np.float32)
    xv = rng.standard_normal((256, 3, 4), dtype=np.float32)
    np.testing.assert_array_equal(ds.x_train, x[:64])
    np.testing.assert_array_equal(ds.y_test, np.argmax(x[64:].reshape(16, -1) @ w, 1))
    np.testing.assert_array_equal(ds.x_valid, xv)
    np.testing.assert_array_equal(ds.y_valid, np.argmax(xv.reshape(256, -1) @ w, 1))
    small = load_dataset("synthetic", num_examples=64, num_test=16, input_shape=(3, 4), num_classes=5,
                         seed=3, num_valid=8)  # train/test do not depend on num_valid
    np.testing.assert_array_equal(small.x_train, ds.x_train)
    np.testing.assert_array_equal(small.x_valid, xv[:8])
    assert ds.num_classes == 5 and ds.input_shape == (3, 4)


def test_mnist1d_generated_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    import mnist1d.data as md

    def no_download(*a, **k):
        raise AssertionError("mnist1d download path used")

    monkeypatch.setattr(md, "get_dataset", no_download)
    ds = offline.mnist1d()
    assert ds.split_sizes == {"train": 3200, "valid": 800, "test": 1000}
    assert ds.x_train.shape == (3200, 40) and ds.x_test.shape == (1000, 40)
    assert ds.input_shape == (40,) and ds.num_classes == 10 and ds.x_train.dtype == np.float32
    cached = list(tmp_path.glob("mnist1d-*.npz"))
    assert len(cached) == 1
    # second call reads the cache (make_dataset must not run again) and gives the same arrays
    monkeypatch.setattr(md, "make_dataset", no_download)
    again = offline.mnist1d()
    np.testing.assert_array_equal(again.x_train, ds.x_train)
    np.testing.assert_array_equal(again.y_test, ds.y_test)
    np.testing.assert_array_equal(again.x_valid, ds.x_valid)
    assert set(np.unique(ds.y_train)) == set(range(10))


# -- TFDS ------------------------------------------------------------------------------------------

tfds = pytest.importorskip("tensorflow_datasets")


class HarnessTinyImages(tfds.core.GeneratorBasedBuilder):
    """A 3-class dataset of 4×4×1 uint8 images, 10 train / 6 test examples."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Tensor(shape=(4, 4, 1), dtype=np.uint8),
                "label": tfds.features.ClassLabel(num_classes=3),
            }),
            supervised_keys=("image", "label"),
            citation="@misc{tiny, title={tiny}}",
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(10, 0), "test": self._generate_examples(6, 1)}

    def _generate_examples(self, n, seed):
        for i, (img, lab) in enumerate(zip(*_tiny_arrays(n, seed), strict=True)):
            yield i, {"image": img, "label": int(lab)}


class HarnessTinyThree(HarnessTinyImages):
    """train (10) / validation (4) / test (6): the dataset's own validation split is used."""

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(10, 0), "validation": self._generate_examples(4, 2),
                "test": self._generate_examples(6, 1)}


class HarnessTinyNoTest(HarnessTinyImages):
    """train (10) / validation (6), ImageNet's layout: validation is the test split."""

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(10, 0), "validation": self._generate_examples(6, 1)}


def _multiset(x, y):
    return sorted((tuple(np.round(a.ravel() * 255).astype(int)), int(b)) for a, b in zip(x, y, strict=True))


def _want(n, seed):
    xs, ys = _tiny_arrays(n, seed)
    return sorted((tuple(a.ravel().astype(int)), int(b)) for a, b in zip(xs, ys, strict=True))


def test_tfds_validation_split_used_or_carved(tmp_path):
    d = str(tmp_path)
    HarnessTinyThree(data_dir=d).download_and_prepare(file_format="array_record")
    HarnessTinyNoTest(data_dir=d).download_and_prepare(file_format="array_record")
    three = load_dataset("tfds:harness_tiny_three", data_dir=d)
    assert three.split_sizes == {"train": 10, "valid": 4, "test": 6}
    assert _multiset(three.x_valid, three.y_valid) == _want(4, 2)
    assert _multiset(three.x_test, three.y_test) == _want(6, 1)
    assert _multiset(three.x_train, three.y_train) == _want(10, 0)  # nothing carved from train
    assert "test = its 'test' split; validation = its 'validation' split" in three.source
    no_test = load_dataset("tfds:harness_tiny_no_test", data_dir=d, validation_fraction=0.3)
    assert no_test.split_sizes == {"train": 7, "valid": 3, "test": 6}
    assert _multiset(no_test.x_test, no_test.y_test) == _want(6, 1)
    assert sorted(_multiset(no_test.x_train, no_test.y_train)
                  + _multiset(no_test.x_valid, no_test.y_valid)) == _want(10, 0)
    assert "test = its 'validation' split; validation = 0.3 of 'train'" in no_test.source


def _tiny_arrays(n, seed):
    r = np.random.default_rng(seed)
    return r.integers(0, 256, (n, 4, 4, 1), dtype=np.uint8), r.integers(0, 3, n)


def test_tfds_array_record_round_trip(tmp_path, monkeypatch):
    HarnessTinyImages(data_dir=str(tmp_path)).download_and_prepare(file_format="array_record")
    assert list(tmp_path.rglob("*.array_record*"))
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))  # default data_dir, the users' path
    ds = load_dataset("tfds:harness_tiny_images")
    assert ds.name == "tfds:harness_tiny_images"
    # no validation split in the dataset: 0.2 of train carved (2 of 10)
    assert ds.split_sizes == {"train": 8, "valid": 2, "test": 6}
    assert ds.num_classes == 3 and ds.citation.startswith("@misc{tiny")
    # records come back in TFDS's shuffled-on-write order: compare as multisets of (image, label)
    assert sorted(_multiset(ds.x_train, ds.y_train) + _multiset(ds.x_valid, ds.y_valid)) == _want(10, 0)
    assert _multiset(ds.x_test, ds.y_test) == _want(6, 1)
    assert float(ds.x_train.max()) <= 1.0 and ds.x_train.dtype == np.float32
    # the same path users use: tfds.data_source reads the same records
    src = tfds.data_source("harness_tiny_images", data_dir=str(tmp_path), download=False)
    assert len(src["train"]) == 10


def test_tfds_missing_fails_fast(tmp_path):
    t0 = time.perf_counter()
    with pytest.raises(data.DatasetNotPreparedError, match="not prepared in data_dir") as ei:
        load_dataset("tfds:mnist", data_dir=str(tmp_path / "empty"))
    assert time.perf_counter() - t0 < 10.0
    assert "download_and_prepare(file_format='array_record')" in str(ei.value)
    assert isinstance(ei.value, FileNotFoundError)
    with pytest.raises(KeyError, match="unknown TFDS dataset 'no_such_dataset_xyz'"):
        load_dataset("tfds:no_such_dataset_xyz", data_dir=str(tmp_path))

"""``tfds:cifar10`` and ``tfds:lm1b`` from a prepared data_dir, tested on fakes of the same shapes.

The fakes subclass TFDS's own ``Cifar10`` and ``lm1b`` builders (same name, version, features) and
only replace the download with generated examples, then prepare them as array_record without
TensorFlow: ``tfds.builder("cifar10", data_dir=...)`` — the path users take — reads them back.
"""

from __future__ import annotations

import numpy as np
import pytest

tfds = pytest.importorskip("tensorflow_datasets")
PIL_Image = pytest.importorskip("PIL.Image")

from tensorflow_datasets.datasets.lm1b.lm1b_dataset_builder import Builder as _Lm1b  # noqa: E402
from tensorflow_datasets.image_classification.cifar import Cifar10 as _Cifar10  # noqa: E402

from harness.data.sources import load_dataset  # noqa: E402


def _images(n, seed):
    r = np.random.default_rng(seed)
    return r.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), r.integers(0, 10, n)


_LINES = ["the cat sat on the mat", "naïve café", "a third line of text"]

with tfds.core.registered.skip_registration():

    class FakeCifar10(_Cifar10):
        """CIFAR-10's builder (32×32×3 uint8 PNG images, 10 classes, an ``id``), 12 train / 5 test."""

        name = "cifar10"

        def _split_generators(self, dl_manager):
            return {"train": self._fake(12, 0), "test": self._fake(5, 1)}

        def _fake(self, n, seed):
            for i, (img, lab) in enumerate(zip(*_images(n, seed), strict=True)):
                # a PIL image is PNG-encoded by TFDS without TensorFlow
                yield f"{seed}_{i}", {"id": f"{seed}_{i}", "image": PIL_Image.fromarray(img),
                                      "label": int(lab)}

    class FakeLm1b(_Lm1b):
        """lm1b's builder (one ``text`` feature, train/test): a few lines repeated."""

        name = "lm1b"

        def _info(self):  # the real one reads its metadata folder; same features
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
                {"text": tfds.features.Text()}), supervised_keys=("text", "text"))

        def _split_generators(self, dl_manager):
            return {"train": self._fake(_LINES * 10), "test": self._fake(_LINES[::-1] * 2)}

        def _fake(self, lines):
            for i, line in enumerate(lines):
                yield i, {"text": line}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tfds")
    FakeCifar10(data_dir=str(d)).download_and_prepare(file_format="array_record")
    FakeLm1b(data_dir=str(d)).download_and_prepare(file_format="array_record")
    return d


def test_cifar10_from_data_dir(data_dir, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", str(data_dir))
    assert tfds.builder("cifar10", data_dir=str(data_dir)).version == "3.0.2"  # the real builder
    ds = load_dataset("tfds:cifar10")
    assert ds.input_shape == (32, 32, 3) and ds.num_classes == 10 and ds.task == "classification"
    assert ds.x_train.dtype == np.float32 and float(ds.x_train.max()) <= 1.0
    assert "Krizhevsky" in ds.citation
    assert len(ds.x_test) == 5 and len(ds.x_train) <= 12  # a validation split comes out of train
    # pixels survive the PNG round trip exactly: compare as multisets of (image, label)
    want = {(a.tobytes(), int(b)) for a, b in zip(*_images(12, 0), strict=True)}
    want |= {(a.tobytes(), int(b)) for a, b in zip(*_images(5, 1), strict=True)}
    got = {(np.round(a * 255).astype(np.uint8).tobytes(), int(b))
           for x, y in ((ds.x_train, ds.y_train), (ds.x_valid, ds.y_valid), (ds.x_test, ds.y_test))
           for a, b in zip(x, y, strict=True)}
    assert got <= want


def test_lm1b_bytes_from_data_dir(data_dir):
    ds = load_dataset("tfds:lm1b", data_dir=str(data_dir), seq_len=16)
    assert ds.task == "sequence" and ds.num_classes == 256 and ds.input_shape == (16,)
    assert ds.x_train.dtype == np.int32 and ds.x_train.shape[1] == 16
    np.testing.assert_array_equal(ds.x_train[:, 1:], ds.y_train[:, :-1])
    # the windows are the UTF-8 bytes of the lines joined by byte 0 (records come back shuffled)
    text = bytes(np.concatenate([ds.x_train[:, 0:1], ds.y_train], 1).astype(np.uint8).ravel())
    for piece in text.split(b"\x00")[1:-1]:
        assert piece.decode("utf-8") in _LINES
    assert len(ds.x_train) > 0 and len(ds.x_test) > 0
    capped = load_dataset("tfds:lm1b", data_dir=str(data_dir), seq_len=16, max_train_sequences=5)
    assert len(capped.x_train) < len(ds.x_train)

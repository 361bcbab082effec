"""The llama.cpp engine on the real default models (and bad files)."""

import os

import numpy as np
import pytest

from omnidraft.assets import models
from omnidraft.llama.engine import Engine, EngineConfig
from omnidraft.errors import ContextOverflow, InvalidModelFile
from omnidraft.llama.invariance import probe


@pytest.fixture(scope="module")
def target():
    e = Engine(models.resolve("qwen2.5-coder-0.5b"), EngineConfig(n_ctx=512, n_threads=2))
    yield e
    e.close()


def test_the_byte_table_reads_like_the_list_of_pieces_it_packs(target):
    """``token_bytes`` packs llama.cpp's pieces into one buffer (issue 41's memory): every id, negative ids,
    slices and iteration give the pieces llama.cpp writes, and ids outside the vocabulary raise IndexError."""
    import ctypes

    from omnidraft.llama.tokenbytes import TokenBytes

    tb, n = target.token_bytes, target.n_vocab
    buf = ctypes.create_string_buffer(256)
    for t in (0, 1, 220, 9707, n - 1, int(np.int32(151643))):
        assert tb[t] == target._piece(t, buf, special=False)
    assert tb[-1] == tb[n - 1] and tb[-n] == tb[0] and tb[10:13] == [tb[10], tb[11], tb[12]]
    pieces = list(tb)
    assert len(pieces) == n and TokenBytes(pieces) == tb == pieces and tb != pieces[:-1]
    assert sum(map(len, pieces)) < 2**20  # the whole Qwen vocabulary spells under 1 MB
    for bad in (n, -n - 1):
        with pytest.raises(IndexError):
            tb[bad]


def test_tokenize_detokenize_and_byte_table(target):
    text = "def f(x):\n    return x  # 日本 🙂"
    ids = target.tokenize(text)
    assert target.detokenize(ids) == text.encode()
    assert target.n_vocab == 151936 and len(target.token_bytes) == target.n_vocab
    assert target.token_bytes[target.tokenize(" the")[0]] == b" the"
    assert target.is_special[target.eos_id] and target.eos_id in target.eog_ids
    assert target.special_text(target.eos_id) == b"<|im_end|>"
    assert "im_start" in target.chat_template
    # control-token text is only parsed when asked
    assert len(target.tokenize("<|im_start|>", special=True)) == 1
    assert len(target.tokenize("<|im_start|>", special=False)) > 1


def test_kv_rollback_then_redecode_reproduces_fresh_logits(target):
    ids = target.tokenize("The capital of France is Paris. The capital of Italy is")
    target.reset()
    target.decode(ids[:-3], "none")
    fresh = target.decode(ids[-3:], "all").copy()
    target.decode(target.tokenize(" Rome, and the capital of Spain"), "none")
    target.rollback(len(ids) - 3)
    assert target.n_past == len(ids) - 3
    again = target.decode(ids[-3:], "all").copy()
    assert np.array_equal(again, fresh)  # bit for bit: stale cells leave no trace


def test_logit_rows_only_where_asked(target):
    ids = target.tokenize("one two three four")
    target.reset()
    rows = target.decode(ids, [0, 2])
    assert rows.shape == (2, target.n_vocab)
    target.reset()
    assert target.decode(ids, "none").shape == (0, target.n_vocab)


def test_small_verification_batches_are_bit_identical(target):
    # the property exact speculative decoding rests on (llama.cpp built with GGML_LLAMAFILE=OFF)
    assert probe(target, max_n=4) == 4


def test_context_overflow_is_a_clear_error(target):
    target.reset()
    with pytest.raises(ContextOverflow):
        target.decode([100] * 600, "none")
    assert target.n_past == 0  # nothing half-done


@pytest.mark.parametrize("content", [b"", b"hello world, not a model", b"GGUF\x03\x00\x00\x00" + b"\x00" * 64,
                                     b"GGUF\x63\x00\x00\x00" + b"\x00" * 64])
def test_bad_files_raise_invalid_model_file(tmp_path, content):
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    with pytest.raises(InvalidModelFile):
        Engine(p)


def test_truncated_real_model_is_refused(tmp_path):
    src = models.resolve("smollm2-135m")
    p = tmp_path / "cut.gguf"
    with open(src, "rb") as f:
        p.write_bytes(f.read(src.stat().st_size // 2))
    with pytest.raises(InvalidModelFile, match="could not load"):
        Engine(p)


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(InvalidModelFile, match="no such file"):
        Engine(tmp_path / "nope.gguf")
    with pytest.raises(models.ModelNotFound):
        models.resolve("no-such-model")


def _mapped(path) -> bool:
    """Whether this process maps ``path`` (a file-backed mapping in /proc/self/maps)."""
    name = str(os.path.realpath(path))
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(name) for line in f)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
def test_each_weight_is_resident_once():
    """Plain weights (exact mode) are used where they lie in the mapped file; repacked ones (fast mode) are
    copies, so the fast mode reads the file instead of mapping it: a mapping would keep the file's pages
    resident beside the copies (the 1.5B q4_0_pure pair peaked at 1.98 GB for a 1.0 GB file, 1.24 after)."""
    path = models.resolve(models.DEFAULT_DRAFT)  # a file no other test here keeps open
    with Engine(path, EngineConfig(n_ctx=256, n_threads=2, batch_invariant=True)):
        assert _mapped(path)
    with Engine(path, EngineConfig(n_ctx=256, n_threads=2, batch_invariant=False)):
        assert not _mapped(path)
    with Engine(path, EngineConfig(n_ctx=256, n_threads=2, batch_invariant=False, mmap=True)):
        assert _mapped(path)


def test_engines_of_one_file_share_its_tables_and_a_rewritten_file_is_read_again(tmp_path):
    """A file's vocabulary tables are read once a process (0.45 s for a 152k vocabulary) and shared read-only;
    a file written anew under the same name is read again, never served another file's tables."""
    import shutil

    path = tmp_path / "vocab.gguf"
    shutil.copy(models.vocab_path("gpt-2"), path)
    with Engine(path, EngineConfig(vocab_only=True)) as a, Engine(path, EngineConfig(vocab_only=True)) as b:
        assert a.token_bytes is b.token_bytes and a.is_special is b.is_special
        assert not a.is_special.flags.writeable
        gpt2 = a.n_vocab
    tmp = tmp_path / "next.gguf"
    shutil.copy(models.vocab_path("qwen2"), tmp)
    os.replace(tmp, path)  # as an export publishes: same name, another file
    with Engine(path, EngineConfig(vocab_only=True)) as c:
        assert c.n_vocab == 151936 != gpt2 and len(c.token_bytes) == c.n_vocab
        assert c.token_bytes[c.tokenize(" the")[0]] == b" the"

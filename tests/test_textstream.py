from omnidraft.vocab.textstream import TextStream


def joined(chunks):
    return "".join(c.text for c in chunks)


def test_utf8_split_across_pushes_is_held_until_complete():
    ts = TextStream()
    data = "a日🙂".encode()
    out = []
    for i in range(len(data)):
        out += ts.push(data[i:i + 1], from_draft=i % 2 == 0)
    out += ts.finish()
    assert joined(out) == "a日🙂"
    assert all("\ufffd" not in c.text for c in out)


def test_stop_string_split_across_pushes_is_never_emitted():
    ts = TextStream(stop=["STOP"])
    out = ts.push(b"hello ST", True) + ts.push(b"OP and more", False)
    assert ts.stopped and joined(out) == "hello "
    assert joined(ts.finish()) == ""


def test_provenance_flags_split_chunks():
    ts = TextStream()
    out = ts.push(b"abc", True) + ts.push(b"de", False)
    assert [(c.text, c.from_draft) for c in out] == [("abc", True), ("de", False)]


def test_false_stop_prefix_is_released():
    ts = TextStream(stop=["<end>"])
    out = ts.push(b"x <e", True)
    assert joined(out) == "x "
    out = ts.push(b"nd but not", True)
    assert joined(out) == "<end but not"
    assert not ts.stopped

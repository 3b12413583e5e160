"""`kill -9` at several moments of each writer, as a crashed machine or an impatient user does
it: afterwards the output is whole (the old version or the new one, never half), the next
run of the command succeeds and leaves nothing beside the output, and a killed export leaves
no converter running.

The moments are exact, not timed: the command runs in a wrapper that stops itself (SIGSTOP)
when its files are written into the staging folder but not yet recorded ("written"), and when
they are recorded and about to be swapped in ("swapping"); the test then kills it. "loading"
kills it a second after its start, before it writes. (The instant between the swap's two
renames: `test_outputs.py` puts a directory in that state.)"""

import os
import signal
import subprocess
import sys
import time

import pytest

import kbert
from helpers import PASSAGES, save_tiny_encoder, tiny_vocab
from kbert import cli, outputs

VOCAB = tiny_vocab(size=120)
MOMENTS = ("loading", "written", "swapping")
# `kbert ARGV...` that stops itself at MOMENT (`kbert.outputs.output`'s two steps).
_WRAPPER = """
import os, signal, sys
from kbert.outputs import output
moment, argv = sys.argv[1], sys.argv[2:]
def stopping(step):
    def run(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGSTOP)
        return step(*args, **kwargs)
    return run
if moment == "written":
    output.Output.commit = stopping(output.Output.commit)
elif moment == "swapping":
    output._swap = stopping(output._swap)
from kbert import cli
sys.exit(cli.main(argv))
"""


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("enc") / "tiny-encoder", VOCAB)


def _staging(out):
    parent, name = os.path.split(str(out))
    return [os.path.join(parent, e) for e in os.listdir(parent)
            if e.startswith(f".{name}.kbert-new-")]


def _stopped(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _kill_at(argv, out, moment):
    """Runs `kbert ARGV` and SIGKILLs it at `moment`; False if it finished first."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    child = subprocess.Popen([sys.executable, "-c", _WRAPPER, moment, *map(str, argv)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    while child.poll() is None:
        if (time.monotonic() - started > 1.0 if moment == "loading" else
                _stopped(child.pid)) or (moment == "converting" and _staging(out)):
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            return True
        time.sleep(0.005)
    return False


def _writers(tmp_path, encoder_dir):
    text = tmp_path / "doc.txt"
    text.write_text("\n\n".join(PASSAGES * 40))
    vocab = os.path.join(encoder_dir, "vocab.txt")
    return {
        "index": (["index", "build", text, "--model", encoder_dir, "--overwrite", "--output"],
                  lambda out: len(kbert.retrieval.Index.load(out)) > 0),
        "hf": (["convert", "--to", "hf", encoder_dir, "--overwrite", "--output"],
               lambda out: os.path.getsize(out / "model.safetensors") > 0),
        "pretraining_data": (["create-pretraining-data", "--input", text, "--vocab", vocab,
                              "--max-seq-length", "16", "--workers", "1", "--overwrite",
                              "--output"],
                             lambda out: any(n.endswith(".tfrecord") for n in os.listdir(out))),
    }


@pytest.mark.parametrize("kind", ["index", "hf", "pretraining_data"])
def test_a_writer_killed_at_any_moment_leaves_a_whole_output(kind, tmp_path, encoder_dir):
    argv, whole = _writers(tmp_path, encoder_dir)[kind]
    out = tmp_path / "out"
    assert cli.main([str(a) for a in argv + [out]]) == 0       # the old version
    (out / "notes.txt").write_text("mine")
    for moment in MOMENTS:
        assert _kill_at(argv + [out], out, moment), moment
        outputs.recover_missing(str(out))             # what a reader does first
        assert outputs.kind_of(out) == kind and whole(out), moment
        assert (out / "notes.txt").read_text() == "mine"
    assert cli.main([str(a) for a in argv + [out]]) == 0       # and it runs again
    assert sorted(os.listdir(tmp_path)) == ["doc.txt", "out"]        # nothing left beside
    assert whole(out) and (out / "notes.txt").read_text() == "mine"


def _converters():
    """Pids of running graph converters (`python -m kbert.runtime.graphs ...`)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"kbert.runtime.graphs" in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_export_stops_its_converter(tmp_path, encoder_dir, monkeypatch):
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "cache"))     # nothing made yet: it converts
    out = tmp_path / "onnx"
    before = set(_converters())
    argv = ["export", encoder_dir, "--format", "onnx", "--output", out]
    assert _kill_at(argv, out, "converting")          # while the converter child runs
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and set(_converters()) - before:
        time.sleep(0.1)
    assert not set(_converters()) - before, "a converter outlived the killed export"
    assert not out.exists()
    assert cli.main([str(a) for a in argv]) == 0
    assert sorted(os.listdir(tmp_path)) == ["cache", "onnx"]
    assert kbert.load(str(out)).embed(["milk"]).shape == (1, 128)


# `kbert index build ...` that says on stdout when it starts splitting a text into passages.
_SPLITTING = """
import signal
import sys
# Ctrl-C as at a terminal: a command started in the background by a shell (`make test &`)
# inherits SIGINT ignored, and Python keeps it ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
from kbert.retrieval import passages
from kbert import cli
split = passages.split_passages
def announced(*args, **kwargs):
    print("splitting", flush=True)
    out = split(*args, **kwargs)
    print("split", flush=True)
    return out
passages.split_passages = announced
sys.exit(cli.main(sys.argv[1:]))
"""


def test_ctrl_c_while_a_long_single_line_text_is_split_stops_the_command(tmp_path,
                                                                         encoder_dir):
    """Ctrl-C (SIGINT) a second into splitting a 5 MB single-line text into passages: the
    command stops in well under the 5 s allowed here (each tokenizer call takes ~16k
    characters, ~0.25 s; it ignored Ctrl-C for minutes when the text went in one call), says
    it was interrupted, and leaves no index."""
    words = "the quick brown fox jumps over the lazy dog and it was good . "
    run = "x" * 2000 + " "                       # a long run: TensorFlow's offsets route
    text = (words * 40 + run) * (5_000_000 // (len(words) * 40 + len(run)))
    (tmp_path / "big.txt").write_text(text.replace("\n", " "))
    out = tmp_path / "idx"
    process = subprocess.Popen(
        [sys.executable, "-c", _SPLITTING, "index", "build", str(tmp_path / "big.txt"),
         "--model", encoder_dir, "--output", str(out), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "splitting"
        time.sleep(1.0)
        sent = time.monotonic()
        # A second Ctrl-C a second later, as a person gives it: a KeyboardInterrupt that lands
        # in a garbage-collector callback (jax's, which TensorFlow imports where jax is
        # installed) is swallowed by Python ("Exception ignored in ...").
        for _ in range(3):
            process.send_signal(signal.SIGINT)
            try:
                rest, err = process.communicate(timeout=1.5)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            rest, err = process.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        process.kill()
    assert process.returncode == 130, err[-2000:]
    assert "split" not in rest                   # stopped while splitting
    assert err.strip().splitlines()[-1] == "kbert index: interrupted"
    assert waited < 5.0, f"the command took {waited:.1f} s to stop"
    assert not out.exists()

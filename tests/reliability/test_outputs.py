"""`kbert.outputs`, the one module every writer goes through: what may be written where, the
user's files kept, the modes, the lock, and the recovery of killed writes."""

import json
import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from kbert import outputs
from kbert.outputs import OutputError


def _write(path, kind="checkpoint", overwrite=True, files=("config.json",)):
    with outputs.writing(path, kind, overwrite=overwrite) as tmp:
        for name in files:
            with open(os.path.join(tmp, name), "w") as f:
                f.write(name)
    return path


# --- what may be written where -----------------------------------------------------------------
@pytest.mark.parametrize("where, why", [("/", "the root directory"),
                                        ("~", "your home directory"),
                                        (".", "the current directory"),
                                        ("..", "a directory above the current one")])
def test_protected_places_are_never_outputs(where, why, tmp_path, monkeypatch):
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = os.path.expanduser(where)
    with pytest.raises(OutputError, match=f"refusing to write over {why}"):
        outputs.check(path, "checkpoint", overwrite=True)
    with pytest.raises(OutputError, match=f"refusing to write over {why}"):
        outputs.check_version(path, 1, overwrite=True)             # a SavedModel's base


def test_a_directory_of_the_users_is_refused_whatever_the_flags(tmp_path):
    user = tmp_path / "u"
    user.mkdir()
    (user / "notes.txt").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(OutputError, match=r"holds files kbert did not write \(notes.txt\); "
                                              r"choose a new or empty directory"):
            _write(user, overwrite=overwrite)
    assert sorted(os.listdir(user)) == ["notes.txt"]
    assert (user / "notes.txt").read_text() == "precious"
    assert sorted(os.listdir(tmp_path)) == ["u"]                   # nothing left beside it


def test_another_kind_is_refused_and_the_own_kind_needs_overwrite(tmp_path):
    index = _write(tmp_path / "i", kind="index")
    with pytest.raises(OutputError, match="holds a kbert index; choose a new or empty"):
        _write(index, kind="checkpoint")
    with pytest.raises(OutputError, match="holds a kbert index already; pass --overwrite"):
        _write(index, kind="index", overwrite=False)
    _write(index, kind="index", files=("new.json",))
    assert outputs.kind_of(index) == "index"
    assert sorted(os.listdir(index)) == [outputs.MARKER, "new.json"]


def test_replacing_keeps_the_users_files_and_refuses_their_folders(tmp_path):
    out = _write(tmp_path / "ck", files=("config.json", "vocab.txt"))
    (out / "notes.txt").write_text("mine")
    os.symlink("notes.txt", out / "link")
    _write(out, files=("config.json",))
    assert sorted(os.listdir(out)) == [outputs.MARKER, "config.json", "link", "notes.txt"]
    assert (out / "notes.txt").read_text() == "mine" and os.readlink(out / "link") == "notes.txt"
    assert outputs.read_marker(str(out))["files"] == ["config.json"]
    (out / "runs").mkdir()
    with pytest.raises(OutputError, match=r"holds folders kbert did not write \(runs\)"):
        _write(out)
    assert (out / "runs").is_dir() and (out / "notes.txt").is_file()


def test_an_empty_directory_and_a_missing_one_are_written(tmp_path):
    (tmp_path / "empty").mkdir()
    for name in ("empty", "missing/deeper"):
        _write(tmp_path / name)
        assert outputs.kind_of(tmp_path / name) == "checkpoint"


def test_outputs_written_before_the_record_are_recognised(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text("{}")
    save_file({"a": np.zeros(2, "float32")}, str(ck / "model.safetensors"),
              metadata={"format": "kbert"})
    assert outputs.kind_of(ck) == "checkpoint"
    (ck / "export.json").write_text("{}")
    assert outputs.kind_of(ck) == "export"
    save_file({"a": np.zeros(2, "float32")}, str(ck / "model.safetensors"),
              metadata={"format": "pt"})                         # a transformers file
    assert outputs.kind_of(ck) is None
    idx = tmp_path / "idx"
    idx.mkdir()
    (idx / "index.json").write_text(json.dumps({"format": "kbert-index"}))
    assert outputs.kind_of(idx) == "index"


def test_files_need_overwrite(tmp_path):
    path = tmp_path / "vocab.txt"
    outputs.check_file(path)
    path.write_text("old")
    with pytest.raises(OutputError, match="exists; pass --overwrite"):
        outputs.check_file(path)
    outputs.check_file(path, overwrite=True)
    with pytest.raises(OutputError, match="is a directory"):
        outputs.check_file(tmp_path, overwrite=True)


# --- SavedModel versions in a model base directory (TF Serving's base/<version>/) -----------------
def _version(base, version, overwrite=False, files=("saved_model.pb",)):
    with outputs.claim_version(base, version, overwrite=overwrite) as out:
        tmp = out.staging()
        for name in files:
            with open(os.path.join(tmp, name), "w") as f:
                f.write(name)
        return out.commit(tmp)


def test_a_version_goes_beside_kbert_s_own_and_replaces_one_only_with_overwrite(tmp_path):
    base = tmp_path / "sm"
    assert _version(base, 1) == str(base / "1")
    _version(base, 2)
    assert sorted(os.listdir(base)) == ["1", "2"]
    assert outputs.kind_of(base) == "saved_model_base" and outputs.kind_of(base / "2") == \
        "saved_model"
    with pytest.raises(OutputError, match=rf"^{base} holds version 2 already; pass "
                                          rf"--overwrite \(overwrite=True\) to replace it"):
        _version(base, 2)
    _version(base, 2, overwrite=True, files=("saved_model.pb", "new.txt"))
    assert sorted(os.listdir(base / "2")) == [outputs.MARKER, "new.txt", "saved_model.pb"]
    assert sorted(os.listdir(tmp_path)) == ["sm"]                 # no lock, no staging left


def test_a_base_holding_anything_but_kbert_s_versions_is_refused(tmp_path):
    base = tmp_path / "sm"
    _version(base, 1)
    (base / "notes.txt").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(OutputError, match=rf"^{base} holds files kbert did not "
                                              rf"write \(notes.txt\); choose a new or empty "
                                              rf"directory$"):
            _version(base, 2, overwrite)
    assert sorted(os.listdir(base)) == ["1", "notes.txt"]
    assert (base / "notes.txt").read_text() == "precious"
    (base / "notes.txt").unlink()
    (base / "7").mkdir()                              # a folder of the user's, a version's name
    with pytest.raises(OutputError, match=r"holds files kbert did not write \(7\)"):
        _version(base, 7, overwrite=True)
    assert sorted(os.listdir(base)) == ["1", "7"] and not os.listdir(base / "7")
    ck = _write(tmp_path / "ck")
    with pytest.raises(OutputError, match="holds a kbert checkpoint; choose a new or empty"):
        outputs.check_version(ck, 1)
    with pytest.raises(OutputError, match=r"sm/1 is a SavedModel version; give the model base "
                                          r"directory above it"):
        outputs.check_version(base / "1", 1)
    assert sorted(os.listdir(tmp_path)) == ["ck", "sm"]


def test_a_base_of_earlier_exports_is_accepted(tmp_path):
    """Versions recorded by earlier kbert releases, and SavedModels from before the record
    (their export_options.json), are kbert's."""
    base = tmp_path / "sm"
    (base / "1").mkdir(parents=True)
    (base / "1" / "saved_model.pb").write_text("")
    outputs.write_json(str(base / "1" / outputs.MARKER), {"kind": "saved_model",
                                                         "files": ["saved_model.pb"]})
    (base / "2" / "assets.extra").mkdir(parents=True)
    (base / "2" / "saved_model.pb").write_text("")
    (base / "2" / "assets.extra" / "export_options.json").write_text("{}")
    assert outputs.kind_of(base) == "saved_model_base"
    _version(base, 3)
    _version(base, 2, overwrite=True)
    assert sorted(os.listdir(base)) == ["1", "2", "3"]
    assert outputs.kind_of(base / "2") == "saved_model"


def test_a_version_is_written_under_the_base_s_lock(tmp_path):
    """A second writer into the base is refused while one writes any version; what a killed
    write of another version left in the base is kbert's, and removed by the next writer."""
    base = tmp_path / "sm"
    _version(base, 1)
    (base / ".1.kbert-new-abc123").mkdir()
    (base / ".1.kbert-lock").write_text("")
    assert outputs.kind_of(base) == "saved_model_base"
    child = _holder(base, 60)
    try:
        with pytest.raises(OutputError, match=rf"{base} is being written by kbert process "
                                              rf"{child.pid}; wait for it"):
            _version(base, 2)
    finally:
        child.kill()
        child.wait()
    _version(base, 2)
    assert sorted(os.listdir(base)) == ["1", "2"]
    assert sorted(os.listdir(tmp_path)) == ["sm"]


# --- modes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_outputs_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        with outputs.writing(tmp_path / "out", "export") as tmp:
            os.makedirs(os.path.join(tmp, "onnx"))
            with open(os.path.join(tmp, "onnx", "embed.onnx"), "w") as f:
                f.write("graph")
            os.chmod(os.path.join(tmp, "onnx"), 0o644)             # what the old code left
        outputs.write_text(str(tmp_path / "vocab.txt"), "[PAD]\n")
    finally:
        os.umask(old)
    for root, dirs, files in os.walk(tmp_path / "out"):
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o777 & ~umask, root
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(os.stat(tmp_path / "vocab.txt").st_mode) == 0o666 & ~umask
    assert outputs.umask() == old


def test_amending_adds_files_with_the_users_modes_and_keeps_the_users_files(tmp_path):
    """`outputs.amend` (training curves beside a finished checkpoint): a new version swapped in
    whole, the checkpoint's files linked (not copied), a user's file kept, new files readable
    by others under umask 022."""
    out = _write(tmp_path / "out", files=("config.json", "model.safetensors"))
    (out / "notes.txt").write_text("mine")
    weights = os.stat(out / "model.safetensors").st_ino
    old = os.umask(0o022)
    try:
        outputs.amend(out, "checkpoint",
                      lambda tmp: outputs.write_text(os.path.join(tmp, "history.json"), "{}"))
    finally:
        os.umask(old)
    assert sorted(os.listdir(out)) == [".kbert-output.json", "config.json", "history.json",
                                       "model.safetensors", "notes.txt"]
    assert (out / "notes.txt").read_text() == "mine"
    assert os.stat(out / "model.safetensors").st_ino == weights
    assert stat.S_IMODE(os.stat(out / "history.json").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o755
    assert "history.json" in json.loads((out / ".kbert-output.json").read_text())["files"]
    assert not [e for e in os.listdir(tmp_path) if e.startswith(".out.")]


# --- the lock ----------------------------------------------------------------------------------
_HOLD = textwrap.dedent("""
    import sys, time
    from kbert import outputs
    with outputs.locked(sys.argv[1]):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def _holder(path, seconds):
    child = subprocess.Popen([sys.executable, "-c", _HOLD, str(path), str(seconds)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_second_writer_is_refused_or_waits(tmp_path):
    out = tmp_path / "out"
    child = _holder(out, 2)
    try:
        with pytest.raises(OutputError, match=rf"{out} is being written by kbert process "
                                              rf"{child.pid}; wait for it"):
            _write(out)
        told = []
        started = time.monotonic()
        with outputs.locked(str(out), wait=True, on_wait=told.append):
            assert time.monotonic() - started > 0.5
        assert told == [f"waiting for kbert process {child.pid}, which is writing {out}"]
    finally:
        child.wait()
    assert sorted(os.listdir(tmp_path)) == []                     # the lock file goes with it


def test_a_killed_holder_releases_the_lock(tmp_path):
    out = tmp_path / "out"
    child = _holder(out, 60)
    child.kill()
    child.wait()
    assert os.path.exists(tmp_path / ".out.kbert-lock")              # left by the kill
    _write(out)
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_claims_nest_within_a_process(tmp_path):
    out = tmp_path / "out"
    with outputs.Output(out, "checkpoint"):
        _write(out)                                    # a save inside a training run
        _write(out)
    assert outputs.kind_of(out) == "checkpoint"


# --- killed writes -----------------------------------------------------------------------------
def test_a_swap_cut_between_its_renames_is_put_back(tmp_path, capsys):
    out = _write(tmp_path / "ck", files=("config.json", "vocab.txt"))
    os.replace(out, tmp_path / ".ck.kbert-old")                    # the kill's state
    os.mkdir(tmp_path / ".ck.kbert-new-abc123")
    assert outputs.recover_missing(str(out))
    assert "restored" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == [outputs.MARKER, "config.json", "vocab.txt"]
    assert sorted(os.listdir(tmp_path)) == ["ck"]                 # the half-made one removed


def test_a_failed_write_leaves_the_old_output_and_nothing_beside_it(tmp_path):
    out = _write(tmp_path / "ck", files=("config.json", "vocab.txt"))
    with pytest.raises(RuntimeError):
        with outputs.writing(out, "checkpoint") as tmp:
            open(os.path.join(tmp, "config.json"), "w").close()
            raise RuntimeError("disk full")
    assert sorted(os.listdir(tmp_path)) == ["ck"]
    assert sorted(os.listdir(out)) == [outputs.MARKER, "config.json", "vocab.txt"]

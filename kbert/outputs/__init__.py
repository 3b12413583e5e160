"""Where kbert writes: the one package every writer goes through.

    kinds.py    what a directory holds (the record, older outputs' manifests); `check`,
                `check_version` (a SavedModel version in a model base directory)
    lock.py     the writers' lock (`flock` on a sibling that exists only while held)
    output.py   `Output`: staging, modes, the record, the swap, recovery; `writing`, `claims`,
                `claim_version`, `amend` (files added to a finished output)

An output is a directory (a checkpoint, an export, a SavedModel version, an index, pretraining
data, experiment results) or one file (a vocabulary). Writing one follows the same four rules:

- **Its kind is recorded and checked.** A finished output holds `.kbert-output.json` (its kind,
  the files kbert wrote, the kbert version). An existing output is replaced only when it is of
  the writer's own kind and `overwrite` is asked for; a directory holding anything else is
  refused in one line (`OutputError`), and so are `/`, the home directory and the current
  directory (or one above it). Outputs written before the record existed are recognised by
  their own manifests (`kind_of`). A SavedModel version goes into a model base directory
  (TF Serving's `base/<version>/`) that is new, empty or holds only kbert's versions: a new
  version is added beside them, an existing one replaced with `overwrite`.
- **Nothing kbert did not write is deleted.** Replacing an output keeps the user's files in it
  (hard links into the new version); a folder of the user's inside it is refused.
- **Swapped in whole.** Files are written into a hidden sibling (`.NAME.kbert-new-*`), then
  renamed into place: a reader sees the old output or the new one. A write killed between the
  two renames of a swap is put right by the next writer or reader (the old version put back,
  one line on stderr); leftovers of killed writes are removed by the next writer.
- **Locked while written, with the user's modes.** A writer holds an exclusive `flock` on a
  hidden sibling (`.NAME.kbert-lock`, there only while held; the kernel releases it if the
  process dies): a second writer waits (`wait=True`, e.g. `kbert index add`) or is refused in
  one line. Directories get 0777 and files 0666 less the user's umask (0755/0644 under the
  usual 022), so a server running as another user (TF Serving, Triton) can read them.

Example:
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "out")
>>> with writing(path, "checkpoint") as tmp:
...     with open(os.path.join(tmp, "config.json"), "w") as f:
...         _ = f.write("{}")
>>> kind_of(path), sorted(os.listdir(path))
('checkpoint', ['.kbert-output.json', 'config.json'])
"""

from kbert.outputs.kinds import (
    KINDS,
    MARKER,
    OutputError,
    check,
    check_file,
    check_version,
    foreign_entries,
    kind_of,
    own_files,
    read_marker,
)
from kbert.outputs.lock import locked
from kbert.outputs.output import (
    Output,
    amend,
    apply_modes,
    claim_version,
    claims,
    die_with_parent,
    recover,
    recover_missing,
    umask,
    write_json,
    write_text,
    writing,
)

__all__ = ["KINDS", "MARKER", "Output", "OutputError", "amend", "apply_modes", "check",
           "check_file", "check_version", "claim_version", "claims",
           "die_with_parent", "foreign_entries", "kind_of", "locked", "own_files", "read_marker",
           "recover", "recover_missing", "umask", "write_json", "write_text", "writing"]

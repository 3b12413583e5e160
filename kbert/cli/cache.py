"""`kbert cache list|remove`: what `kbert.hub` keeps of hub models (kbert.hub)."""

from __future__ import annotations

import argparse

from kbert.cli.common import examples
from kbert.wording import plural


def add_cache(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="show or free the hub models kept (downloaded and "
                                     "converted once, loaded offline after that)",
                       epilog=examples("kbert cache list",
                                       "kbert cache remove bert-base-uncased",
                                       "kbert cache remove hf://BAAI/bge-small-en-v1.5 "
                                       "--downloads"))
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the converted checkpoints kept: repository, "
                                              "revisions, commit, size, folder",
                                 epilog=examples("kbert cache list",
                                                 "kbert cache list --cache-dir /data/models"))
    remove = actions.add_parser("remove", help="remove a model's converted checkpoints (it "
                                               "is downloaded or converted again when next "
                                               "loaded)",
                                epilog=examples("kbert cache remove bert-base-uncased",
                                                "kbert cache remove hf://BAAI/bge-small-en-v1.5 "
                                                "--downloads"))
    remove.add_argument("name", metavar="NAME",
                        help="hf://ORG/NAME (all its commits; @COMMIT: that one), a bare name "
                             "(bert-base-uncased) or ORG/NAME")
    remove.add_argument("--downloads", action="store_true",
                        help="also remove the files huggingface_hub downloaded for them")
    for q in (listing, remove):
        q.add_argument("--cache-dir", help="the cache_dir the models were loaded with "
                                           "(default: $KBERT_CACHE/hub, ~/.cache/kbert/hub)")
    listing.set_defaults(func=run_list)
    remove.set_defaults(func=run_remove)


def run_list(args: argparse.Namespace) -> None:
    from kbert import hub
    rows = hub.cached_models(args.cache_dir)
    if not rows:
        print(f"no hub model kept in {hub.cache.root(args.cache_dir)}")
        return
    table = [("REPOSITORY", "REVISIONS", "COMMIT", "SIZE", "FOLDER")]
    for row in rows:
        repo = row["repo"] + (f" ({row['subfolder']})" if row["subfolder"] else "")
        table.append((repo, ",".join(row["revisions"]) or "-", row["commit"][:12],
                      f"{row['bytes'] / 1e6:.1f} MB", row["path"]))
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    for r in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(r, widths)) + "  " + r[4])
    total = sum(r["bytes"] for r in rows)
    print(f"{plural(len(rows), 'checkpoint')}, {total / 1e6:.1f} MB")


def run_remove(args: argparse.Namespace) -> None:
    from kbert import hub
    for path in hub.remove(args.name, cache_dir=args.cache_dir, downloads=args.downloads):
        print(f"removed {path}")

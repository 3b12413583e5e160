"""`kbert app`: the Gradio playground (`app/`, installed beside kbert)."""

from __future__ import annotations

import argparse
from types import ModuleType

from kbert.cli.common import CliError, examples


def app_server() -> ModuleType | None:
    """The playground's launcher (`app/`, installed beside kbert); None where it is absent.

    Imported on use: the playground needs gradio, which the rest of the CLI does not."""
    try:
        from app import server
    except ModuleNotFoundError as e:
        if e.name not in ("app", "app.server", "gradio"):
            raise
        return None
    return server


def add_app(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("app", help="serve the Gradio playground (127.0.0.1:7860 by default)",
                       epilog=examples("kbert app",
                                       "kbert app --model out/sst2 out/reviews --port 7861",
                                       "kbert app --host 0.0.0.0 --runtime onnx --preload"))
    server = app_server()
    if server is not None:
        server.add_arguments(p)
    p.set_defaults(func=run_app)


def run_app(args: argparse.Namespace) -> None:
    server = app_server()
    if server is None:
        raise CliError("the playground needs gradio: pip install 'kbert[app]'")
    server.serve(args.model, args.models_dir, args.host, args.port, args.share, args.concurrency,
                 args.preload, runtime=args.runtime, dtype=args.dtype)

"""`kbert serve`: `kbert.server` (models, exports and an index behind an HTTP API)."""

from __future__ import annotations

import argparse

from kbert.cli.common import CliError, examples, positive_int
from kbert.cli.export import DTYPE_NAMES, RUNTIME_NAMES


def add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="serve models, exports and an index over HTTP (TF Serving's REST API, "
                      "the methods as JSON routes, search; on Ray Serve)",
        description="Routes: TF Serving's GET /v1/models/NAME[/metadata] and POST "
                    "/v1/models/NAME:predict (SavedModels); POST /embed, /fill_mask, "
                    "/next_sentence, /classify, /tag, /answer, /rerank, /search, /ask and "
                    "OpenAI's /v1/embeddings (JSON); GET /health, /ready, /v1/models, /metrics. "
                    "See docs/serving.md.",
        epilog=examples("kbert serve minilm-l6-v2",
                        "kbert serve minilm-l6-squad sst2=out/sst2 --port 8502",
                        "kbert serve /tmp/bert --port 8501",
                        "kbert serve minilm-l6-squad minilm-l6-squad-reranker --index my-index "
                        "--reranker minilm-l6-squad-reranker"))
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="what to serve, each as PATH or NAME=PATH: a shipped name, a checkpoint, "
                        "an ONNX/OpenVINO export, a Hub model (hf://ORG/NAME), or a SavedModel "
                        "base folder (NAME/1/, as TF Serving reads it)")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on; 0.0.0.0 serves every network this machine is "
                        "on (your choice: there is no authentication)")
    p.add_argument("--port", type=positive_int, default=8501, help="the HTTP port")
    p.add_argument("--index", help="a `kbert index` folder for POST /search and /ask "
                                    "(default: none, those routes answer 404)")
    p.add_argument("--reader", help="the served model /ask reads with (default: the first with "
                                    "a span head)")
    p.add_argument("--reranker", help="the served model /ask reranks with (default: none)")
    p.add_argument("--runtime", default="auto", choices=RUNTIME_NAMES,
                   help="what runs the checkpoints: auto (the fastest measured on this CPU; an "
                        "export's own), keras, openvino, onnx")
    p.add_argument("--dtype", default="auto", choices=DTYPE_NAMES,
                   help="auto (bfloat16 where the CPU runs it natively), float32, bfloat16, int8")
    p.add_argument("--threads", type=positive_int,
                   help="threads an OpenVINO / ONNX Runtime pass uses (default: all cores)")
    p.add_argument("--replicas", type=positive_int, default=1,
                   help="copies of the models, each running one batch at a time")
    p.add_argument("--max-batch-tokens", type=positive_int, default=16384,
                   help="the token budget of one batch of merged requests")
    p.add_argument("--batch-timeout-ms", type=float, default=2.0,
                   help="while requests come concurrently, a batch under budget waits this long "
                        "for more (TF Serving's batch_timeout_micros; a lone request never "
                        "waits; 0: no wait)")
    p.add_argument("--max-queued", type=positive_int, default=4096,
                   help="inputs that may wait; beyond, requests are refused at once (429; 503 "
                        "on :predict)")
    p.add_argument("--max-inputs", type=positive_int, default=1024,
                   help="texts (or instances) one request may carry (413 beyond)")
    p.add_argument("--max-request-bytes", type=positive_int, default=8 * 1024 * 1024,
                   help="the largest request body (413 beyond)")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> None:
    try:
        from kbert.server import deploy
        from kbert.server.state import Limits, ServeConfig
    except ModuleNotFoundError as e:
        raise CliError(f"kbert serve needs {e.name}: pip install 'kbert[serve]'") from None
    if args.batch_timeout_ms < 0:
        raise CliError("--batch-timeout-ms must be >= 0")
    config = ServeConfig(
        models=list(args.models), index=args.index, reader=args.reader,
        reranker=args.reranker, runtime=args.runtime, dtype=args.dtype, threads=args.threads,
        max_batch_tokens=args.max_batch_tokens, batch_timeout_ms=args.batch_timeout_ms,
        max_queued=args.max_queued,
        limits=Limits(max_body=args.max_request_bytes, max_inputs=args.max_inputs))
    status = deploy.serve(config, args.host, args.port, args.replicas)
    if status:
        raise SystemExit(status)

"""Command line and launch: `python -m app` / `kbert app` serve the playground on loopback."""

import argparse
import logging
import os

DEFAULT_MODELS_DIR = None  # None: the first directory of kbert.checkpoint.search_path()
DEFAULT_CONCURRENCY = 16
MAX_UPLOAD = "10mb"   # refused by Gradio on upload; the Search tab takes text files up to 2 MB


def add_arguments(parser):
    parser.add_argument("--model", action="extend", nargs="+", default=[], metavar="CKPT",
                        help="checkpoints to serve besides those found in --models-dir: "
                             "directories, shipped names or Hub models (hf://ORG/NAME, "
                             "bert-base-uncased: downloaded and converted once) "
                             "(default: none)")
    parser.add_argument("--models-dir", default=DEFAULT_MODELS_DIR,
                        help="directory whose checkpoint sub-directories are served "
                             "(default: the first of $KBERT_MODELS, then the shipped "
                             "saved_models)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1; 0.0.0.0 exposes it)")
    parser.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    parser.add_argument("--share", action="store_true",
                        help="also open a public gradio.live share link")
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                        help="requests handled at once; the rest wait in the queue (default "
                             f"{DEFAULT_CONCURRENCY}: concurrent fill-mask requests run as one "
                             "padded batch)")
    parser.add_argument("--preload", action="store_true",
                        help="load every checkpoint (and make its OpenVINO/ONNX graphs) before "
                             "serving (default: on first use, but for the Search tab's "
                             "retriever and reader, loaded in the background from start-up)")
    parser.add_argument("--runtime", default="keras",
                        choices=("auto", "keras", "openvino", "onnx"),
                        help="what runs the model: keras (default), openvino or onnx (graphs "
                             "made on first use, cached), or auto (the fastest measured for "
                             "the precision on this machine)")
    parser.add_argument("--dtype", default="auto",
                        choices=("auto", "float32", "bfloat16", "int8"),
                        help="precision (default auto: bfloat16 where the CPU has AMX or "
                             "AVX-512 BF16, else float32)")
    return parser


def models_dir_or_default(models_dir=DEFAULT_MODELS_DIR):
    """`models_dir`, or the first directory of the checkpoint search path."""
    from kbert.checkpoint.files import search_path  # light: no Keras, no TensorFlow
    return models_dir or next(iter(search_path()), "saved_models")


def build(models=(), models_dir=DEFAULT_MODELS_DIR, concurrency=DEFAULT_CONCURRENCY,
          runtime="keras", dtype="auto"):
    """(demo, registry): the queued Blocks app over the checkpoints found, each run by
    `runtime` in `dtype` (checked here, before anything loads)."""
    from app.registry import Registry, discover
    from app.ui import build_demo
    models_dir = models_dir_or_default(models_dir)
    registry = Registry(discover(models_dir, models), runtime=runtime, dtype=dtype)
    demo = build_demo(registry)
    demo.queue(default_concurrency_limit=max(1, concurrency), max_size=256)
    return demo, registry


def serve(models=(), models_dir=DEFAULT_MODELS_DIR, host="127.0.0.1", port=7860, share=False,
          concurrency=DEFAULT_CONCURRENCY, preload=False, block=True, runtime="keras",
          dtype="auto"):
    """Builds and launches the app; returns (demo, registry) when `block` is False."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    demo, registry = build(models, models_dir, concurrency, runtime, dtype)
    if not registry.names:
        logging.getLogger("app").warning(
            "no checkpoints found in %s (pass --model DIR); the tabs will say so",
            models_dir or "the checkpoint search path (KBERT_MODELS, then saved_models/)")
    for name in registry.names if preload else ():
        registry.get(name).prepare()      # the graph runtimes' graphs too: no first-click wait
    if not preload:
        from app.search import preload as preload_search
        preload_search(registry)          # in the background: the first search need not wait
    demo.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=not block,
                show_error=False, quiet=not block, footer_links=["api"],
                max_file_size=MAX_UPLOAD)
    return demo, registry


def main(argv=None):
    # every option's help states its default: the description's line breaks are all to keep
    parser = add_arguments(argparse.ArgumentParser(
        prog="python -m app", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter))
    args = parser.parse_args(argv)
    from app.registry import InputError
    try:
        serve(args.model, args.models_dir, args.host, args.port, args.share, args.concurrency,
              args.preload, runtime=args.runtime, dtype=args.dtype)
    except InputError as e:
        parser.exit(1, f"python -m app: error: {e}\n")

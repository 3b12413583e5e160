"""`kbert serve` on one machine: a local Ray cluster, Ray Serve's HTTP ingress on HOST:PORT,
the `KbertReplica` deployment (`kbert.server.replica`), and a clean stop.

Why Ray Serve (docs/serving.md): it installs beside TensorFlow 2.20 and the rest of the pinned
set (KServe 0.21 pins protobuf < 7, pandas < 3 and psutil < 6), the same deployment runs on a
Ray cluster (RayService on Kubernetes: deploy/), and with its HAProxy ingress a request costs
~1.7 ms of framework on this 2-core machine against ~7.5 ms through its default Python proxy.

Stopping: SIGTERM or Ctrl-C stops taking requests, lets the requests in flight finish (at most
`GRACE_S` seconds), stops Ray and exits 0; a second signal exits at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from kbert.server.servables import ServeError, resolve_specs
from kbert.server.state import ServeConfig

GRACE_S = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port(host: str, port: int) -> None:
    """One line where HOST:PORT cannot be listened on (in use, or not this machine's)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def _ray_environment(folder: str) -> None:
    """What Ray reads from the environment at import, set before it is imported: the HAProxy
    ingress, its files in this server's own folder, free ports for Ray Serve's fallback proxy
    (two servers on one machine do not collide), no usage reports."""
    defaults = {
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": os.path.join(folder, "h", "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": os.path.join(folder, "h", "admin.sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": os.path.join(folder, "h"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": os.path.join(folder, "h", "server-state"),
        "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(free_port()),
        "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": str(free_port()),
        # HAProxy's own stats page and Prometheus frontend: fixed ports (8404, 9101) by
        # default, which a second server on the machine cannot bind. Ray's template binds
        # them on every interface (it has no host setting): docs/serving.md says so.
        "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port("")),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port("")),
        "RAY_USAGE_STATS_ENABLED": "0",
        # Ray runs its workers at nice 15, the replica with them: under load it would yield
        # the cores to any other process (the load tool, a neighbour). Serving is the work here.
        "RAY_worker_niceness": "0",
        # Ray Serve's controller checks its deployments 10 times a second by default: on two
        # cores that is CPU the replica wants; twice a second is plenty for one machine.
        "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
        "RAY_DEDUP_LOGS": "0",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    os.makedirs(os.path.join(folder, "h"), exist_ok=True)


def _raise_open_files_limit() -> None:
    """A connection is a file: the soft limit on open files (often 1,024) up to the hard one,
    for this process and the Ray processes it starts, as a server needs."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65536 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _short_temp_dir() -> str:
    """Where this server's folder goes: the temp dir, or /tmp where its path is long (HAProxy
    adds a 56-character folder and takes a socket path of at most 97 bytes)."""
    base = tempfile.gettempdir()
    if len(base) > 20 and os.access("/tmp", os.W_OK | os.X_OK):
        base = "/tmp"
    return base


def serve(config: ServeConfig, host: str = "127.0.0.1", port: int = 8501, replicas: int = 1,
          on_ready: Callable[[str], None] | None = None) -> int:
    """Serves `config` on http://HOST:PORT until SIGTERM or Ctrl-C; returns the exit status."""
    check_port(host, port)
    named = resolve_specs(config.models)      # bad names, and Hub downloads, before Ray starts
    config.models = [f"{name}={path}" for name, path in named.items()]
    if config.index is not None and not os.path.isdir(config.index):
        raise ServeError(f"--index {config.index}: no such directory")
    _raise_open_files_limit()
    # Ray's files (sockets, logs) in a folder of this server's: short (a socket path is at most
    # 107 bytes) and the user's own (a shared /tmp/ray may be another user's).
    with tempfile.TemporaryDirectory(prefix="kbs-", dir=_short_temp_dir()) as folder:
        _ray_environment(folder)
        try:
            return _run(config, host, port, replicas, folder, on_ready)
        finally:
            _stop_leftovers(folder)


def _signals(folder: str) -> tuple[threading.Event, Callable[[], None]]:
    """(an event SIGTERM and Ctrl-C set, a function restoring the handlers before). Installed
    after `ray.init`, which installs handlers of its own. A second signal exits at once, with
    the server's processes killed and its folder removed."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        if stop.is_set():
            _stop_leftovers(folder, grace=0)
            shutil.rmtree(folder, ignore_errors=True)      # this server's own temp folder
            os._exit(130)
        stop.set()
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return stop, restore


def _processes(folder: str, name: str = "") -> list[int]:
    """The processes whose command line names `folder` (and `name`, where given)."""
    found = []
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read()
        except OSError:
            continue
        if folder.encode() in line and name.encode() in line and _state(int(pid)) not in "ZX":
            found.append(int(pid))
    return found


def _drain_ingress(folder: str, seconds: float) -> bool:
    """HAProxy's soft stop (SIGUSR1): it closes its port at once, lets the requests in flight
    finish and exits. Waits for that (at most `seconds`); False where there is no HAProxy of
    this server's (the ingress is Ray's Python proxy: `serve.shutdown` drains it)."""
    proxies = _processes(folder, "haproxy")
    if not proxies:
        return False
    for pid in proxies:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + seconds
    while proxies and time.monotonic() < deadline:
        time.sleep(0.05)
        proxies = [p for p in proxies if _state(p) not in "ZX"]
    return True


def _stop_leftovers(folder: str, grace: float = 5.0) -> None:
    """Ends the processes Ray started for this server that outlive `ray.shutdown` (its HAProxy
    does): those whose command line names this server's folder. SIGTERM, then SIGKILL to those
    still alive after `grace` seconds."""
    mine = _processes(folder)
    for pid in mine:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while mine and time.monotonic() < deadline:
        mine = [p for p in mine if _state(p) not in "ZX"]
        time.sleep(0.1)
    for pid in mine:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _run(config: ServeConfig, host: str, port: int, replicas: int, folder: str,
         on_ready: Callable[[str], None] | None) -> int:
    import ray
    from ray import serve as ray_serve

    from kbert.server.replica import KbertReplica

    print(f"kbert serve: starting Ray (logs in {folder}/ray)", file=sys.stderr, flush=True)
    for name in ("ray", "ray.serve"):          # its INFO lines on the driver's stderr
        logging.getLogger(name).setLevel(logging.WARNING)
    ray.init(address="local", include_dashboard=False, log_to_driver=False,
             configure_logging=False, _temp_dir=os.path.join(folder, "ray"),
             num_cpus=os.cpu_count())
    stop, restore = _signals(folder)
    try:
        ray_serve.start(http_options={"host": host, "port": port},
                        logging_config={"log_level": "WARNING", "enable_access_log": True})
        deployment = ray_serve.deployment(
            KbertReplica, name="kbert", num_replicas=replicas,
            # the batcher queues and refuses (429/503); Ray must not queue in front of it
            max_ongoing_requests=100_000, graceful_shutdown_timeout_s=GRACE_S,
            graceful_shutdown_wait_loop_s=0.2, health_check_period_s=10,
            ray_actor_options={"num_cpus": 0})
        try:
            ray_serve.run(deployment.bind(config), name="kbert", route_prefix="/",
                          blocking=False)
        except Exception as e:                 # a replica that failed to load its models
            raise ServeError(_cause(e)) from None
        url = f"http://{host}:{port}"
        names = ", ".join(m.split("=", 1)[0] for m in config.models)
        print(f"kbert serve: serving {names} at {url} (SIGTERM or Ctrl-C stops)",
              file=sys.stderr, flush=True)
        if on_ready is not None:
            on_ready(url)
        while not stop.wait(0.5):
            pass
        print("kbert serve: stopping (finishing the requests in flight)", file=sys.stderr,
              flush=True)
        started = time.monotonic()
        if not _drain_ingress(folder, GRACE_S):
            _bounded(ray_serve.shutdown, GRACE_S + 15)
        print(f"kbert serve: stopped in {time.monotonic() - started:.1f} s", file=sys.stderr,
              flush=True)
        return 0
    finally:
        _bounded(ray.shutdown, 15)
        restore()


def _bounded(fn: Callable[[], object], seconds: float) -> None:
    """`fn()`, or exit the process when it takes longer than `seconds` (a stop is bounded)."""
    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(seconds):
            print(f"kbert serve: the stop took over {seconds:.0f} s; exiting", file=sys.stderr,
                  flush=True)
            os._exit(1)
    threading.Thread(target=watchdog, daemon=True).start()
    try:
        fn()
    finally:
        done.set()


def _cause(error: BaseException) -> str:
    """The last line that names an error in a replica's traceback (Ray wraps it)."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    for line in reversed(lines):
        for marker in ("ServeError: ", "ValueError: ", "HubError: ", "OSError: ",
                       "FileNotFoundError: ", "RuntimeOptionError: ", "Error: "):
            if marker in line:
                return "a model failed to load: " + line.split(marker, 1)[1]
    return "a model failed to load: " + (lines[-1] if lines else type(error).__name__)


__all__ = ["GRACE_S", "check_port", "free_port", "serve"]

"""Start and stop the processes of a graph built by simreal_ros.deploy.graph (`simreal up`, the demo).

Each node is its own process in its own process group, so a terminal's Ctrl-C reaches only the
parent, which stops the nodes with SIGTERM (a clean rclpy shutdown), then SIGKILL.
"""
import os
import signal
import subprocess
import time


def start_graph(graph, log_dir=None, env=None, quiet=False, only=None):
    """Start the nodes of `graph` (those named in `only`, default all) as processes.

    The overlay file is written once per graph. Returns [(spec, Popen, log path)].
    """
    from simreal_ros.deploy.graph import write_overlay
    if graph.overlay_path is None:
        write_overlay(graph, log_dir)
    procs = []
    for spec in graph.nodes:
        if only is not None and spec.name not in only:
            continue
        log = None
        if log_dir:
            log = os.path.join(str(log_dir), f'{spec.name}.log')
            out = open(log, 'w')
        else:
            out = None
        proc = subprocess.Popen(graph.command(spec), stdout=out,
                                stderr=subprocess.STDOUT if out else None,
                                env=dict(env or os.environ, PYTHONUNBUFFERED='1'),
                                preexec_fn=_die_with_parent)   # own process group
        if out:
            out.close()
        procs.append((spec, proc, log))
        if not quiet:
            print(f'started {spec.name} (pid {proc.pid})', flush=True)
    return procs


def _die_with_parent():
    """In the child: leave the terminal's process group, get SIGTERM when the parent dies.

    The terminal's Ctrl-C then reaches only `simreal up`, which stops the nodes with SIGTERM:
    rclpy shuts a running node down cleanly on it, and a node still importing exits quietly
    (a SIGINT there would print a KeyboardInterrupt traceback).
    """
    os.setpgid(0, 0)
    try:
        import ctypes
        ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_graph(procs, timeout=15.0):
    """Stop the processes in reverse start order: SIGTERM (a clean rclpy shutdown), SIGKILL."""
    codes = {}
    for spec, proc, _ in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for spec, proc, _ in reversed(procs):
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            try:    # its threads' stacks into its log (run() prints them on SIGUSR1), then kill
                proc.send_signal(signal.SIGUSR1)
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
            proc.kill()
            proc.wait()
        codes[spec.name] = proc.returncode
    return codes

"""Helpers for integration tests: real node processes and a listener node in the test process."""
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class NodeProcess:
    """A simreal_ros node started as its own process (python -m simreal_ros.nodes.<node>)."""

    def __init__(self, node, params_file=None, params=None, extra_args=(), name=None):
        cmd = [sys.executable, '-m', f'simreal_ros.nodes.{node}', '--ros-args']
        if name:
            cmd += ['-r', f'__node:={name}']
        if params_file:
            cmd += ['--params-file', str(params_file)]
        if params:
            # A later params file overrides an earlier one for the same node; `-p` would not
            # (it is a wildcard override, weaker than the file's node section).
            import yaml
            override = os.path.join('/tmp', f'simreal-test-params-{os.getpid()}-{time.time_ns()}.yaml')
            with open(override, 'w') as f:
                yaml.safe_dump({name or node: {'ros__parameters': dict(params)}}, f)
            cmd += ['--params-file', override]
        cmd += list(extra_args)
        self.cmd = cmd
        self.log_path = os.path.join('/tmp', f'simreal-test-{node}-{os.getpid()}-{time.time_ns()}.log')
        self._log = open(self.log_path, 'w+')
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO,
                                     env=dict(os.environ, PYTHONUNBUFFERED='1'))

    def output(self):
        if not self._log.closed:
            self._log.flush()
        with open(self.log_path) as f:
            return f.read()

    def wait_exit(self, timeout):
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout=10.0):
        if self.proc.poll() is None:
            self.proc.send_signal(2)  # SIGINT, as Ctrl-C
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.stop()
        if exc_type is not None:   # shown under "Captured stdout" of the failing test
            lines = self.output().splitlines()
            print(f'--- last {min(len(lines), 60)} lines of {" ".join(self.cmd[2:3])} '
                  f'({self.log_path}) ---')
            print('\n'.join(lines[-60:]))


def wait_for(predicate, timeout, interval=0.01, what='condition'):
    """Wait until predicate() is truthy; return its value or raise AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'timed out after {timeout} s waiting for {what}')
        time.sleep(interval)


class Spinner:
    """Spin a node of the test process in a background thread."""

    def __init__(self, node):
        from rclpy.executors import SingleThreadedExecutor
        self.node = node
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self._stop = False
        self.thread.start()

    def _spin(self):
        while not self._stop:
            self.executor.spin_once(timeout_sec=0.05)

    def stop(self):
        self._stop = True
        self.thread.join(timeout=2)
        self.executor.remove_node(self.node)
        self.node.destroy_node()

"""What the Python package's tests share: the accelrt binary, a small job,
and a real `accelrt serve` on its own socket and state folder (as
tests/tenancy/service.sh starts one)."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import accelrt

BIN = os.environ.get("ACCELRT_BIN", "")
PYTHON = sys.executable

# The model and data of the jobs here, shared with the shell tests:
# sparse 2000 -> 32 relu -> 300 softmax, on generated data.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jobs",
                       "small.yaml")) as _f:
    MODEL_AND_DATA = _f.read()
# A job that trains in well under a second on one thread: 30 iterations, an
# evaluation and a checkpoint every 10.
SMALL_JOB = "name: small\ndevice: host\nseed: 1\n" + MODEL_AND_DATA + """\
train: {batch: 32, iterations: 30, eval_every: 10, checkpoint_every: 10, threads: 1,
        optimizer: {adam: {lr: 0.001}}}
"""
SMALL_ITERATIONS, SMALL_EVAL_EVERY, SMALL_BATCH = 30, 10, 32
SMALL_INPUT, SMALL_HIDDEN, SMALL_OUT = 2000, 32, 300


def jobs_file(name, iterations, repeat):
    """A `jobs:` file: `repeat` copies (named a-1, a-2, ...) of the model
    above, each trained for `iterations`, under the fifo policy."""
    job = "name: a\n" + MODEL_AND_DATA + ("train: {batch: 32, iterations: %d, threads: 1, "
                            "optimizer: {adam: {lr: 0.001}}}\nrepeat: %d\n"
                            % (iterations, repeat))
    return ("name: %s\ndevice: host\nruntime: {policy: fifo, memory: 256MiB}\njobs:\n  - "
            % name + textwrap.indent(job, "    ")[4:])


def need_binary(test):
    if not BIN or not os.access(BIN, os.X_OK):
        test.fail("ACCELRT_BIN does not name the accelrt binary (%r); ctest sets it" % BIN)


def until(what, fn, seconds=60):
    """Calls fn until it returns something true; a hang guard, not a timing
    check."""
    end = time.monotonic() + seconds
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.1)


def run_cli(*args, cwd=None, timeout=120):
    """python3 -m accelrt ARGS: (exit status, stdout, stderr)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(
        os.path.dirname(accelrt.__file__)), env.get("PYTHONPATH")) if p)
    p = subprocess.run([PYTHON, "-m", "accelrt"] + list(args), capture_output=True, text=True,
                       cwd=cwd, env=env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


class Server:
    """`accelrt serve` on DIR/s.sock with its state in DIR/state (host
    device, fifo policy, 256 MiB, one thread)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="accelrt-py-")
        os.chmod(self.dir, 0o755)  # jobs write outputs below it
        self.socket = os.path.join(self.dir, "s.sock")
        self.log_path = os.path.join(self.dir, "serve.log")
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--state", os.path.join(self.dir, "state"), "--socket", self.socket,
             "--device", "host", "--policy", "fifo", "--memory", "256MiB", "--threads", "1"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        client = accelrt.Client(self.socket, timeout=30)

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("accelrt serve exited with %d:\n%s"
                                     % (self.proc.returncode, self.log()))
            try:
                return client.server_version()
            except accelrt.Error:
                return None
        self.version = until("the server to answer", up)
        return self

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

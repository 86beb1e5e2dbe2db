"""Readers for what a run writes into its ``output.dir`` (README.md,
"Outputs"): ``metrics.jsonl``, ``summary.json`` and ``trace.json``.
``checkpoint.bin`` has its own module (checkpoint.py).

A file that is not what accelrt writes raises ``FormatError`` naming the
file, the byte offset and what was wrong; the one damage tolerated is a
metrics file's torn last line, which a run killed mid-write leaves.
"""

import json
import os

from .errors import FormatError


def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise FormatError(path, None, "cannot read it: %s" % (e.strerror or e))


def _parse_json(path, data, offset=0):
    """One JSON value from data (bytes); FormatError at the failing byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(path, offset + e.start, "not UTF-8 text")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        at = offset + len(text[:e.pos].encode("utf-8"))
        raise FormatError(path, at, "not JSON (line %d, column %d: %s)"
                          % (e.lineno, e.colno, e.msg))


def read_metrics(path):
    """The lines of a ``metrics.jsonl``, a list of dicts in file order: one
    per evaluation, and others that ``evaluations()`` leaves out.  A last
    line without its newline that does not parse is the tail of a run
    killed mid-write and is dropped; any other line that is not a JSON
    object raises FormatError (which line, at which byte).  Blank lines are
    skipped."""
    data = _read_bytes(path)
    out = []
    at = 0
    lineno = 0
    while at < len(data):
        end = data.find(b"\n", at)
        torn = end < 0
        end = len(data) if torn else end
        lineno += 1
        line = data[at:end]
        if line.strip():
            try:
                obj = _parse_json(path, line, at)
            except FormatError as e:
                if torn:
                    break
                raise FormatError(path, e.offset, "line %d is %s" % (lineno, e.what))
            if not isinstance(obj, dict):
                raise FormatError(path, at, "line %d is not a JSON object" % lineno)
            out.append(obj)
        at = end + 1
    return out


def evaluations(lines):
    """The evaluation lines among a metrics file's lines: not the runner's
    ``{"event": ...}`` lines (a job run by the service or a ``jobs:`` file),
    nor ``{"kind": "train"}`` (``train.log_every``) or ``{"kind":
    "iteration"}`` (a distributed worker's) lines."""
    return [m for m in lines if "event" not in m and m.get("kind", "eval") == "eval"]


def read_summary(path):
    """A ``summary.json``: the dict of a run's final figures (for a single
    job ``samples_per_s``, ``loss``, ``p_at_1``, ``iterations``, ...; for a
    ``jobs:`` file or the service's runner ``policy``, ``makespan_s``,
    ``jobs``, ...)."""
    obj = _parse_json(path, _read_bytes(path))
    if not isinstance(obj, dict):
        raise FormatError(path, 0, "a summary is a JSON object, this is a %s"
                          % type(obj).__name__)
    return obj


class Trace(list):
    """The events of a ``trace.json`` (Chrome trace format), a list of
    dicts in file order, with the file's other top-level keys in
    ``display_time_unit`` and ``other_data`` (``None`` when absent)."""

    display_time_unit = None
    other_data = None


def read_trace(path):
    """A ``trace.json`` in the Chrome trace format: the object form
    ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` that accelrt writes
    (the bare array form is read too).  Returns a Trace (a list of event
    dicts); every event must be an object with a string ``ph``, and
    complete events (``ph`` ``X``) numeric ``ts`` and ``dur``."""
    obj = _parse_json(path, _read_bytes(path))
    trace = Trace()
    if isinstance(obj, dict):
        if not isinstance(obj.get("traceEvents"), list):
            raise FormatError(path, None, "the trace object has no traceEvents array")
        events = obj["traceEvents"]
        trace.display_time_unit = obj.get("displayTimeUnit")
        trace.other_data = obj.get("otherData")
    elif isinstance(obj, list):
        events = obj
    else:
        raise FormatError(path, 0, "a trace is a JSON object or array, this is a %s"
                          % type(obj).__name__)
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or not isinstance(ev.get("ph"), str):
            raise FormatError(path, None, "event %d is not an object with a phase (ph)" % i)
        if ev["ph"] == "X":
            for k in ("ts", "dur"):
                v = ev.get(k)
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise FormatError(path, None, "complete event %d (%r) has no numeric %s"
                                      % (i, ev.get("name"), k))
    trace.extend(events)
    return trace


def complete_events(events, pid=None, tid=None):
    """The complete events (``ph`` ``X``: a span with ``ts`` and ``dur`` in
    microseconds), optionally of one pid and/or tid, in file order."""
    return [e for e in events if e.get("ph") == "X" and (pid is None or e.get("pid") == pid)
            and (tid is None or e.get("tid") == tid)]


def group_by_thread(events):
    """The complete events grouped by ``(pid, tid)``, each group sorted by
    start time: ``{(pid, tid): [event, ...]}``."""
    groups = {}
    for e in complete_events(events):
        groups.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for g in groups.values():
        g.sort(key=lambda e: e["ts"])
    return groups


def thread_names(events):
    """The names that metadata events give: ``{(pid, tid): name}`` from
    ``thread_name`` events and ``{(pid, None): name}`` from
    ``process_name`` ones."""
    names = {}
    for e in events:
        if e.get("ph") != "M" or not isinstance(e.get("args"), dict):
            continue
        if e.get("name") == "thread_name":
            names[(e.get("pid"), e.get("tid"))] = e["args"].get("name")
        elif e.get("name") == "process_name":
            names[(e.get("pid"), None)] = e["args"].get("name")
    return names


def read_output(folder):
    """What a run's output folder holds, read: ``{"metrics": [...],
    "summary": {...}, "trace": Trace, "checkpoint": Checkpoint}``, each only
    when its file is there."""
    from .checkpoint import read_checkpoint
    readers = (("metrics", "metrics.jsonl", read_metrics),
               ("summary", "summary.json", read_summary),
               ("trace", "trace.json", read_trace),
               ("checkpoint", "checkpoint.bin", read_checkpoint))
    out = {}
    for key, name, reader in readers:
        p = os.path.join(folder, name)
        if os.path.exists(p):
            out[key] = reader(p)
    return out

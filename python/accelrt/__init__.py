"""accelrt from Python: a client for the execution service (``accelrt
serve``) and readers for what runs write.  Standard library only; NumPy is
used by ``read_checkpoint`` when it is installed.

    import accelrt
    c = accelrt.Client()                     # the socket accelrt submit uses
    job = c.submit("job.yaml", sets={"train.epochs": 1})
    for line in c.logs(job, follow=True):
        print(line["text"])
    m = accelrt.read_metrics("runs/job/metrics.jsonl")
    w = accelrt.read_checkpoint("runs/job/checkpoint.bin")["hidden.w"]

``python3 -m accelrt`` mirrors the CLI's submit, ps, logs and cancel.
python/README.md is the guide; docs/service.md the protocol.
"""

from .checkpoint import Checkpoint, read_checkpoint
from .client import Client, default_socket
from .errors import (Error, FormatError, ProtocolError, ServerError, UsageError,
                     VersionError)
from .readers import (Trace, complete_events, evaluations, group_by_thread, read_metrics,
                      read_output, read_summary, read_trace, thread_names)

__all__ = ["Client", "default_socket", "Error", "ServerError", "VersionError",
           "ProtocolError", "UsageError", "FormatError", "read_metrics", "evaluations",
           "read_summary", "read_trace", "read_output", "Trace", "complete_events",
           "group_by_thread", "thread_names", "read_checkpoint", "Checkpoint"]

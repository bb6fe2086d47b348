"""A member of a coupled job, for the rendezvous integration tests: it learns who it is
from its environment and finds its partner through the run's key-value store.

``python rendezvous_member.py OUT MODE``; MODE:

- ``connect``: member 0 listens on MASTER_ADDR:MASTER_PORT and puts that address
  (``coalloc.job.put``); member 1 gets it with ``coalloc kv get`` (the CLI), connects
  and sends a greeting; member 0 records what it received.
- ``requeue``: on attempt 1 member 0 puts ``stale``, member 1 reads it and fails (exit 3:
  the gang is requeued); on attempt 2 member 1 finds no ``stale`` (a fresh store), puts
  ``done`` and member 0 waits for it.

Each member writes ``OUT/member-<index>-attempt-<n>.json``: its rendezvous variables and
what it saw.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from coalloc import job

NAMES = ("COALLOC_JOB_ID", "COALLOC_ATTEMPT", "COALLOC_RUN", "COALLOC_SUBTASK",
         "COALLOC_SUBTASKS", "COALLOC_NODE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
         "MASTER_ADDR", "MASTER_PORT", "OMPI_MCA_mpi_yield_when_idle", "I_MPI_WAIT_MODE",
         "MPIR_CVAR_POLLS_BEFORE_YIELD", "COALLOC_KV_URL", "FROM_JOB_FILE")
WAIT_S = 120.0


def main() -> int:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    env = os.environ
    rank, attempt = job.rank(), job.attempt()
    record: dict[str, object] = {k: env.get(k) for k in NAMES}
    record["has_token"] = bool(env.get("COALLOC_KV_TOKEN"))
    code = 0
    if mode == "connect" and rank == 0:
        host, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
        with socket.create_server((host, port)) as server:
            server.settimeout(WAIT_S)
            job.put("addr", f"{host}:{port}")
            conn, _ = server.accept()
            with conn:
                record["received"] = conn.recv(100).decode()
    elif mode == "connect":
        addr = subprocess.run(
            [sys.executable, "-m", "coalloc.cli", "kv", "get", "addr", "--timeout",
             str(WAIT_S)], check=True, capture_output=True, text=True).stdout.strip()
        record["addr"] = addr
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as conn:
            conn.sendall(f"hello from member {rank}".encode())
    elif rank == 0 and attempt == 1:
        job.put("stale", "from attempt 1")
        record["done"] = job.get("done", timeout=WAIT_S)  # never set: killed at the requeue
    elif attempt == 1:
        record["stale"] = job.get("stale", timeout=WAIT_S)
        code = 3
    elif rank == 0:
        record["done"] = job.get("done", timeout=WAIT_S)
    else:
        try:
            record["stale"] = job.get("stale", timeout=0)
        except job.KeyNotSet:
            record["stale"] = None
        job.put("done", "yes")
    (out / f"member-{rank}-attempt-{attempt}.json").write_text(json.dumps(record))
    return code


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""HERD's scalability argument (HERD sec. 3.3, 4.3, fig. 6) as far as one host shows it: what each
client costs the server when answers are rdm SENDs (tcp;ofi_rxm: a connection per client and
worker) against datagrams (--herd-responses dgram: one udp endpoint per worker, an address per
client). For each mode and client count: a fabkv-server on tcp (2 workers), N herd clients in this
process, each connected and then one PUT to each worker (rxm opens its connections on the first
message), then the server's resident memory, open descriptors (sockets among them) and threads,
and the set-up time per client (connect, then the first requests).

    python3 scripts/herd-dgram-scale.py BIN_DIR PYTHON_DIR [COUNTS...]   (default 1 4 16 64 256)

Prints one JSON object per line and a markdown table at the end. docs/results/herd-dgram-2026-11-27.md
"""
import json
import os
import socket
import subprocess
import sys
import time

WORKERS = 2


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) / 1024.0  # MiB
            elif k == "Threads":
                out[k] = int(v)
    fds = os.listdir(f"/proc/{pid}/fd")
    sockets = 0
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                sockets += 1
        except OSError:
            pass
    out["fds"] = len(fds)
    out["sockets"] = sockets
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(bin_dir, mode, max_clients):
    port = free_port()
    argv = [f"{bin_dir}/fabkv-server", "--provider", "tcp", "--listen", f"127.0.0.1:{port}",
            "--protocols", "herd", "--workers", str(WORKERS), "--cores", "-1",
            "--max-clients", str(max_clients), "--memory", "64M", "--log", "warn",
            "--herd-responses", mode]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    line = ""
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if line.startswith("READY"):
            return p, f"127.0.0.1:{port}"
        if not line and p.poll() is not None:
            break
    p.kill()
    raise RuntimeError(f"fabkv-server did not start ({mode}): {line!r}")


def keys_per_worker(fabkv, n_keys):
    # Enough distinct keys that both workers get one with near certainty (hash partitioning).
    return [b"scale-%d" % i for i in range(n_keys)]


def run(fabkv, bin_dir, mode, n):
    server, address = start_server(bin_dir, mode, max(64, n + 8))
    try:
        time.sleep(0.5)
        idle = proc_status(server.pid)
        clients, t_connect, t_first = [], 0.0, 0.0
        keys = keys_per_worker(fabkv, 8)
        for i in range(n):
            t0 = time.monotonic()
            c = fabkv.Client(address, protocol="herd", provider="tcp", timeout_ms=10000)
            t1 = time.monotonic()
            for k in keys:
                c.put(k, b"v")
            t2 = time.monotonic()
            t_connect += t1 - t0
            t_first += t2 - t1
            clients.append(c)
        time.sleep(0.5)
        held = proc_status(server.pid)
        layout = clients[0].layout if hasattr(clients[0], "layout") else {}
        for c in clients:
            c.close()
        row = {
            "mode": mode, "clients": n,
            "server_rss_idle_mib": round(idle["VmRSS"], 1),
            "server_rss_mib": round(held["VmRSS"], 1),
            "server_hwm_mib": round(held["VmHWM"], 1),
            "rss_per_client_kib": round((held["VmRSS"] - idle["VmRSS"]) * 1024 / n, 1),
            "fds_idle": idle["fds"], "fds": held["fds"],
            "sockets_idle": idle["sockets"], "sockets": held["sockets"],
            "fds_per_client": round((held["fds"] - idle["fds"]) / n, 2),
            "threads": held["Threads"],
            "connect_ms_per_client": round(t_connect * 1000 / n, 2),
            "first_requests_ms_per_client": round(t_first * 1000 / n, 2),
            "responses": layout.get("responses", mode) if isinstance(layout, dict) else mode,
        }
        return row
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    bin_dir, py_dir = sys.argv[1], sys.argv[2]
    counts = [int(a) for a in sys.argv[3:]] or [1, 4, 16, 64, 256]
    sys.path.insert(0, py_dir)
    import fabkv  # noqa: E402 (the build's package)
    rows = []
    for n in counts:
        for mode in ("rdm", "dgram"):
            row = run(fabkv, bin_dir, mode, n)
            print(json.dumps(row), flush=True)
            rows.append(row)
    cols = ["mode", "clients", "server_rss_mib", "rss_per_client_kib", "fds", "sockets",
            "fds_per_client", "threads", "connect_ms_per_client",
            "first_requests_ms_per_client"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

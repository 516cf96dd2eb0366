"""The HA bench (issue 38), driven by scripts/ha-bench.sh: runs per second through 1 lead
on SQLite, then 1, 2 and 3 `antler up` leads sharing one throwaway PostgreSQL (the runs
store and the leases in one database), the takeover time from a lead's SIGKILL to its
runs' `lead_takeover` event on the survivor, and how late a run's events reach a client
that follows it on a lead that does not drive it, against a client on the lead that does.

Each run is a short replayed playbook (the lead's scripted model: write_file, then an
answer) sent with `POST /api/runs` (`playbook_yaml`, the operator's token) to a lead's
gateway over HTTP, then `GET /api/runs/{id}/events` on the same keep-alive connection
until `event: end`. Runs are spread round robin over the leads' gateways. Figures are
ratios to the SQLite single lead measured in the same invocation; nothing is asserted on
time. Exits 1 when a run fails or a killed lead's run is not taken over and completed.

Environment: ANTLER_BIN_DIR (the antler binary's directory), PG_BIN (PostgreSQL's bin),
HA_BENCH_RUNS (60), HA_BENCH_CLIENTS (8), HA_BENCH_KILLS (5), HA_BENCH_KILL_RUNS (3, runs
in flight on the lead killed), HA_BENCH_LEADS (1,2,3), HA_BENCH_TTL_MS (3000: the lease
time to live), HA_BENCH_PHASES (throughput,takeover,lag: the parts to run),
HA_BENCH_LAG_STEPS (30: the followed run's steps).
"""

import http.client
import json
import os
import pwd
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BIN_DIR = os.path.abspath(os.environ.get("ANTLER_BIN_DIR", "target/debug"))
ANTLER = os.path.join(BIN_DIR, "antler")
PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")
RUNS = int(os.environ.get("HA_BENCH_RUNS", "60"))
CLIENTS = int(os.environ.get("HA_BENCH_CLIENTS", "8"))
KILLS = int(os.environ.get("HA_BENCH_KILLS", "5"))
KILL_RUNS = int(os.environ.get("HA_BENCH_KILL_RUNS", "3"))
LEADS = [int(n) for n in os.environ.get("HA_BENCH_LEADS", "1,2,3").split(",")]
TTL_MS = int(os.environ.get("HA_BENCH_TTL_MS", "3000"))
PHASES = os.environ.get("HA_BENCH_PHASES", "throughput,takeover,lag").split(",")
LAG_STEPS = int(os.environ.get("HA_BENCH_LAG_STEPS", "30"))
WARM_UP = 2  # runs per lead before a measured phase

# The measured run: write a file, present it, answer (three model turns).
PLAYBOOK = """
turns:
  - tool_calls:
      - {name: write_file, args: {description: note, path: /mnt/user-data/outputs/note.md, content: bench}}
  - tool_calls:
      - {name: present_files, args: {filepaths: [/mnt/user-data/outputs/note.md]}}
  - content: The note is written and presented.
"""

# A run still running when its lead is killed: the model "thinks" after the first step.
SLOW_PLAYBOOK = """
turns:
  - tool_calls:
      - {name: write_file, args: {description: first, path: /mnt/user-data/outputs/a.md, content: a}}
  - delay_ms: 6000
    tool_calls:
      - {name: write_file, args: {description: second, path: /mnt/user-data/outputs/b.md, content: b}}
  - tool_calls:
      - {name: present_files, args: {filepaths: [/mnt/user-data/outputs/a.md, /mnt/user-data/outputs/b.md]}}
  - content: Both files are written and presented.
"""

CONFIG = f"""tools:
  - {{name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}}
sandbox:
  use: deerflow.sandbox.local:LocalSandboxProvider
tool_search:
  enabled: false
antler:
  ha:
    lease_ttl_ms: {TTL_MS}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- A throwaway PostgreSQL ------------------------------------------------------------


class Postgres:
    """initdb + postgres in a temporary directory (as the `postgres` user under root),
    Unix socket and 127.0.0.1; stopped and removed by `stop`."""

    def __init__(self, scratch):
        self.dir = os.path.join(scratch, "pg")
        os.mkdir(self.dir)
        user = None
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            user = (entry.pw_uid, entry.pw_gid)
            os.chown(self.dir, *user)

        def demote():
            if user:
                os.setgid(user[1])
                os.setuid(user[0])

        data = os.path.join(self.dir, "data")
        subprocess.run(
            [f"{PG_BIN}/initdb", "-D", data, "-U", "postgres", "-A", "trust",
             "-E", "UTF8", "--locale=C"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=demote, cwd=self.dir,
        )
        self.port = free_port()
        log = open(os.path.join(self.dir, "postgres.log"), "w")
        # synchronous_commit=off: a commit does not wait for its WAL flush, as SQLite's
        # WAL with synchronous=NORMAL (the SQLite store's setting) does not fsync a commit.
        self.proc = subprocess.Popen(
            [f"{PG_BIN}/postgres", "-D", data, "-k", self.dir, "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c",
             "synchronous_commit=" + os.environ.get("HA_BENCH_PG_SYNC", "off"),
             "-c", "max_connections=100"],
            stdout=log, stderr=log, preexec_fn=demote, cwd=self.dir,
        )
        deadline = time.time() + 30
        while subprocess.run([f"{PG_BIN}/pg_isready", "-h", self.dir, "-p", str(self.port)],
                             stdout=subprocess.DEVNULL).returncode != 0:
            if time.time() > deadline:
                raise RuntimeError("PostgreSQL did not start: " + self.dir)
            time.sleep(0.1)

    def sql(self, db, query):
        out = subprocess.run(
            [f"{PG_BIN}/psql", "-h", self.dir, "-p", str(self.port), "-U", "postgres",
             "-d", db, "-Atqc", query],
            capture_output=True, text=True,
        )
        if out.returncode != 0:
            raise RuntimeError(f"psql: {out.stderr.strip()}")
        return out.stdout

    def database(self, name):
        self.sql("postgres", f"CREATE DATABASE {name}")
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---- Leads -----------------------------------------------------------------------------


class Lead:
    """`antler up` (no workers) in its own session; its gateway on 127.0.0.1."""

    def __init__(self, scratch, name, base, dsn):
        self.runtime = os.path.join(scratch, name)
        env = dict(os.environ)
        env.update(ANTLER_BIN_DIR=BIN_DIR, ANTLER_SANDBOX_BASE_DIR=base,
                   ANTLER_GATEWAY_ADDR="127.0.0.1:0",
                   RUST_LOG="warn")
        env.pop("ANTLER_HA_DSN", None)
        env.pop("ANTLER_STORE_DSN", None)
        if dsn:
            env["ANTLER_STORE_DSN"] = dsn
        self.log = open(self.runtime + ".log", "w")
        self.proc = subprocess.Popen(
            [ANTLER, "--runtime-dir", self.runtime, "up", "--workers", "0", "--config",
             os.path.join(scratch, "config.yaml")],
            env=env, cwd=scratch, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=self.log, start_new_session=True,
        )
        deadline = time.time() + 60
        while True:
            if self.healthy() and os.path.exists(os.path.join(self.runtime, "gateway.token")):
                break
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"lead {name} did not come up: see {self.runtime}.log")
            time.sleep(0.2)
        with open(os.path.join(self.runtime, "gateway.addr")) as f:
            self.addr = "127.0.0.1:" + f.read().strip().rsplit(":", 1)[1]
        with open(os.path.join(self.runtime, "gateway.token")) as f:
            self.token = f.read().strip()

    def healthy(self):
        out = subprocess.run([ANTLER, "--runtime-dir", self.runtime, "status", "--json"],
                             capture_output=True, text=True)
        try:
            procs = json.loads(out.stdout)
        except ValueError:
            return False
        return len(procs) == 3 and all(p.get("healthy") for p in procs)

    def kill(self):
        """SIGKILL of the lead alone (its children go with it), reaped."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        self.kill()
        # Whatever of its session outlived it.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ---- Runs ------------------------------------------------------------------------------


def submit(conn, token, n, playbook):
    body = json.dumps({"task": f"Write a note ({n})", "user": "bench",
                       "playbook_yaml": playbook})
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for _ in range(60):
        conn.request("POST", "/api/runs", body, headers)
        resp = conn.getresponse()
        text = resp.read()
        if resp.status == 201:
            return json.loads(text)["run_id"]
        if resp.status == 503:
            time.sleep(float(resp.getheader("Retry-After", "1")))
            continue
        raise RuntimeError(f"POST /api/runs: {resp.status}: {text[:300]!r}")
    raise RuntimeError("POST /api/runs: 503 sixty times")


def wait_end(conn, token, run_id):
    conn.request("GET", f"/api/runs/{run_id}/events", headers={"Authorization": f"Bearer {token}"})
    resp = conn.getresponse()
    text = resp.read().decode(errors="replace")
    if resp.status != 200:
        raise RuntimeError(f"events of {run_id}: {resp.status}: {text[:300]}")
    _, _, rest = text.partition("event: end\ndata: ")
    if not rest:
        raise RuntimeError(f"the events of {run_id} ended without `end`")
    view = json.loads(rest.split("\n\n", 1)[0])
    if view.get("status") != "success":
        raise RuntimeError(f"run {run_id} ended {view.get('status')}: {view.get('error')}")


def phase(leads, runs, first):
    """`runs` runs from CLIENTS clients at once, run n on leads[n % len(leads)]: wall
    time, per-run latencies, failures."""
    lock = threading.Lock()
    state = {"next": 0, "failed": 0, "times": []}

    def client():
        conns = {}
        while True:
            with lock:
                n = state["next"]
                state["next"] += 1
            if n >= runs:
                break
            lead = leads[(first + n) % len(leads)]
            conn = conns.get(lead.addr) or http.client.HTTPConnection(lead.addr, timeout=120)
            conns[lead.addr] = conn
            t = time.monotonic()
            try:
                wait_end(conn, lead.token, submit(conn, lead.token, first + n, PLAYBOOK))
                with lock:
                    state["times"].append(time.monotonic() - t)
            except Exception as e:  # noqa: BLE001 - reported and counted
                conn.close()
                conns.pop(lead.addr, None)
                with lock:
                    state["failed"] += 1
                    if state["failed"] <= 3:
                        print(f"  run failed: {e}", file=sys.stderr)
        for c in conns.values():
            c.close()

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - started, sorted(state["times"]), state["failed"]


def pct(values, p):
    return values[round((len(values) - 1) * p)] if values else float("nan")


def throughput(scratch, label, count, dsn):
    """`count` leads on one store (SQLite when `dsn` is None): runs/s, p50, p90, failed."""
    base = os.path.join(scratch, f"base-{label}")
    leads = []
    try:
        for i in range(count):
            leads.append(Lead(scratch, f"{label}-{i}", base, dsn))
        _, _, warm_failed = phase(leads, WARM_UP * count, 0)
        wall, times, failed = phase(leads, RUNS, WARM_UP * count)
    finally:
        for lead in leads:
            lead.stop()
    return len(times) / wall, pct(times, 0.5), pct(times, 0.9), failed + warm_failed


def takeover(scratch, pg):
    """KILLS times: a fresh lead gets KILL_RUNS slow runs, is killed with SIGKILL once it
    holds them all, and each run's `lead_takeover` event (its `at_ms`) is timed from the
    kill; the survivor completes every run. Returns the samples (s) and the failures."""
    dsn = pg.database("bench_takeover")
    db = dsn.rsplit("/", 1)[1]
    base = os.path.join(scratch, "base-takeover")
    samples, failures = [], 0
    survivor = Lead(scratch, "takeover-survivor", base, dsn)
    try:
        for k in range(KILLS):
            victim = Lead(scratch, f"takeover-victim-{k}", base, dsn)
            try:
                conn = http.client.HTTPConnection(victim.addr, timeout=60)
                run_ids = [submit(conn, victim.token, 1000 * k + i, SLOW_PLAYBOOK)
                           for i in range(KILL_RUNS)]
                conn.close()
                ids = ",".join(f"'{r}'" for r in run_ids)
                # Every run leased (epoch 1) and past its first step: the model thinks.
                deadline = time.time() + 60
                while True:
                    held = pg.sql(db, f"SELECT count(*) FROM run_leases WHERE run_id IN ({ids})"
                                      " AND lead_id IS NOT NULL AND epoch = 1").strip()
                    steps = pg.sql(db, "SELECT count(*) FROM (SELECT run_id FROM checkpoints"
                                       f" WHERE run_id IN ({ids}) GROUP BY run_id"
                                       " HAVING count(*) >= 3) s").strip()
                    if held == str(KILL_RUNS) and steps == str(KILL_RUNS):
                        break
                    if time.time() > deadline:
                        raise RuntimeError(f"the victim's runs never got going ({held}, {steps})")
                    time.sleep(0.05)
                killed_ms = time.time() * 1000
                victim.kill()
            finally:
                victim.stop()
            pending = set(run_ids)
            deadline = time.time() + 60
            while pending and time.time() < deadline:
                rows = pg.sql(db, "SELECT run_id, event FROM run_events WHERE run_id IN"
                                  f" ({ids}) AND event LIKE '%lead_takeover%'")
                for line in rows.splitlines():
                    run_id, _, event = line.partition("|")
                    if run_id in pending:
                        pending.discard(run_id)
                        samples.append((json.loads(event)["at_ms"] - killed_ms) / 1000)
                time.sleep(0.02)
            failures += len(pending)
            # The survivor completes them.
            deadline = time.time() + 90
            while time.time() < deadline:
                running = pg.sql(db, f"SELECT count(*) FROM runs WHERE run_id IN ({ids})"
                                     " AND status = 'running'").strip()
                if running == "0":
                    break
                time.sleep(0.2)
            ok = pg.sql(db, f"SELECT count(*) FROM runs WHERE run_id IN ({ids})"
                            " AND status = 'success'").strip()
            if ok != str(KILL_RUNS):
                print(f"  kill {k}: {ok} of {KILL_RUNS} runs completed", file=sys.stderr)
                failures += KILL_RUNS - int(ok or 0)
            print(f"  kill {k + 1}: " + ", ".join(f"{s:.2f} s" for s in samples[-KILL_RUNS:]),
                  flush=True)
    finally:
        survivor.stop()
    return sorted(samples), failures


def stamped_events(lead, run_id, out):
    """Follows `run_id`'s events on `lead` until `end`: each event id with when it came."""
    conn = http.client.HTTPConnection(lead.addr, timeout=120)
    conn.request("GET", f"/api/runs/{run_id}/events",
                 headers={"Authorization": f"Bearer {lead.token}"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"events of {run_id} on {lead.addr}: {resp.status}")
    while True:
        line = resp.readline()
        if not line or line.startswith(b"event: end"):
            break
        if line.startswith(b"id: "):
            out[line[4:].strip().decode()] = time.monotonic()
    conn.close()


def stream_lag(scratch, pg):
    """Two leads on one database; a run of LAG_STEPS steps on A followed by a client on A
    (which drives it: its log) and one on B (the store, woken by the run's notices): how
    much later each event reaches B's client than A's. Returns the lags (s)."""
    dsn = pg.database("bench_lag")
    base = os.path.join(scratch, "base-lag")
    steps = "".join(
        f"  - delay_ms: 137\n    tool_calls:\n      - {{name: write_file, args: {{description: s{i},"
        f" path: /mnt/user-data/outputs/s{i}.md, content: x}}}}\n"
        for i in range(LAG_STEPS))
    playbook = "turns:\n" + steps + "  - content: done\n"
    a = Lead(scratch, "lag-a", base, dsn)
    b = Lead(scratch, "lag-b", base, dsn)
    try:
        # Both leads' listeners connected (each gateway starts its own), else B's client
        # would be measured polling.
        deadline = time.time() + 30
        while int(pg.sql("bench_lag", "SELECT count(*) FROM pg_stat_activity"
                         " WHERE datname = current_database()"
                         " AND query = 'LISTEN antler_run_events'") or 0) < 2:
            if time.time() > deadline:
                raise RuntimeError("the leads do not listen for run notices")
            time.sleep(0.05)
        conn = http.client.HTTPConnection(a.addr, timeout=60)
        run_id = submit(conn, a.token, 0, playbook)
        conn.close()
        on_a, on_b = {}, {}
        readers = [threading.Thread(target=stamped_events, args=(a, run_id, on_a)),
                   threading.Thread(target=stamped_events, args=(b, run_id, on_b))]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
    finally:
        a.stop()
        b.stop()
    return sorted(max(0.0, on_b[i] - t) for i, t in on_a.items() if i in on_b), len(on_a)


def main():
    if not os.access(ANTLER, os.X_OK):
        print(f"ha-bench: no {ANTLER}: cargo build --workspace --bins (or set ANTLER_BIN_DIR)",
              file=sys.stderr)
        return 2
    scratch = tempfile.mkdtemp(prefix="antler-habench-", dir="/tmp")
    os.chmod(scratch, 0o755)
    with open(os.path.join(scratch, "config.yaml"), "w") as f:
        f.write(CONFIG)
    profile = "release" if "release" in os.path.abspath(BIN_DIR) else "debug"
    load = open("/proc/loadavg").read().split()[:3]
    print(f"ha-bench: {RUNS} runs (write_file, present_files, an answer; the scripted model) from"
          f" {CLIENTS} clients over HTTP, spread over the leads' gateways; {profile}"
          f" binaries ({BIN_DIR}); {os.cpu_count()} CPUs, load average {' '.join(load)}",
          flush=True)
    pg = Postgres(scratch)
    failures = 0
    try:
        if "throughput" in PHASES:
            failures += print_throughput(scratch, pg)
        if "takeover" in PHASES:
            failures += print_takeover(scratch, pg)
        if "lag" in PHASES:
            lags, sent = stream_lag(scratch, pg)
            print(f"events on another lead: {LAG_STEPS} steps 137 ms apart; of {sent} events"
                  f" A's client got, B's got {len(lags)}, later than A's by p50"
                  f" {pct(lags, 0.5) * 1000:.1f} ms, p90 {pct(lags, 0.9) * 1000:.1f} ms, max"
                  f" {pct(lags, 1.0) * 1000:.1f} ms", flush=True)
            failures += sent - len(lags)
    finally:
        pg.stop()
        if os.environ.get("HA_BENCH_KEEP"):
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    if failures:
        print(f"ha-bench: {failures} runs failed", file=sys.stderr)
        return 1
    return 0


def print_throughput(scratch, pg):
    """The runs/s table; the failed runs."""
    failures = 0
    rows = []
    rate, p50, p90, failed = throughput(scratch, "sqlite", 1, None)
    failures += failed
    rows.append(("SQLite", 1, rate, p50, p90, failed))
    baseline = rate
    print(f"  SQLite, 1 lead: {rate:.1f} runs/s", flush=True)
    for count in LEADS:
        dsn = pg.database(f"bench_{count}")
        rate, p50, p90, failed = throughput(scratch, f"pg{count}", count, dsn)
        failures += failed
        rows.append(("PostgreSQL", count, rate, p50, p90, failed))
        print(f"  PostgreSQL, {count} lead(s): {rate:.1f} runs/s", flush=True)
    print()
    print("| store | leads | runs/s | vs SQLite 1 lead | run p50 | run p90 | failed |")
    print("|---|---|---|---|---|---|---|")
    for store, count, rate, p50, p90, failed in rows:
        print(f"| {store} | {count} | {rate:.1f} | {rate / baseline:.2f}x |"
              f" {p50 * 1000:.0f} ms | {p90 * 1000:.0f} ms | {failed} |")
    print(flush=True)
    return failures


def print_takeover(scratch, pg):
    """The takeover times; the runs not taken over."""
    failures = 0
    print(f"takeover: {KILLS} times, a lead holding {KILL_RUNS} running runs killed with"
          f" SIGKILL beside a survivor (lease ttl {TTL_MS} ms); from the kill to each"
          " run's lead_takeover event (at_ms)", flush=True)
    samples, failed = takeover(scratch, pg)
    failures += failed
    if samples:
        print(f"takeover: {len(samples)} runs taken over ({failed} not): p50"
              f" {statistics.median(samples):.2f} s, min {samples[0]:.2f} s, max"
              f" {samples[-1]:.2f} s")
    return failures


if __name__ == "__main__":
    sys.exit(main())

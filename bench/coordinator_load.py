"""Coordinator under load: N simulated peers on the real control channel of a real `swarmhub serve`.

What it does, in one run:
1. starts a coordinator subprocess (`LocalSwarm`) on a fresh PostgreSQL database (or SQLite with
   `--database sqlite`), creates a run and a join token through the API;
2. registers N + P peers with real `POST /api/peers/register` calls, concurrently;
3. idle phase: P probe peers hold control channels (Hello, then a Heartbeat a second each) and
   send `WorkRequest`s, timing until the coordinator's `NoWork`/`WorkGrant` reply arrives: the
   control-channel round-trip; side by side, GET /api/runs/{id} and GET /api/runs/{id}/peers;
4. load phase: one or more load-generator processes open the other N channels (Hello, then a
   Heartbeat a second each, reading everything the coordinator pushes); the same measurements are
   repeated, plus the heartbeat rate the coordinator absorbed (its own `swarmhub_heartbeats_total`
   before and after), its CPU use, the peer-row writes PostgreSQL saw, and how late the load
   generators were against their own heartbeat schedule (client lag);
5. times one stage decision over 10,000 synthetic peers (the rebalancing policy when it exists).

The coordinator's own handling time of a heartbeat is not visible from outside (a heartbeat has
no reply), so "latency" here is the WorkRequest -> NoWork round-trip measured by a client peer
while the coordinator is under the heartbeat load: it includes the client's and the server's
event loops, the websocket framing both ways and the coordinator's run lock.

    .venv/bin/python -m bench.coordinator_load [--smoke] [--out DIR] [--peers N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import random
import re
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.report import RESULTS_DIR, print_table, write_results
from swarmhub.wire import DATA_PLANE_VERSION
from tests.server.probe_responder import ProbeResponder

DEFAULT_POSTGRES_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


# ---- small helpers --------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(values: list[float]) -> dict[str, float]:
    """p50/p99/max in milliseconds of a list of seconds."""
    return {
        "n": len(values),
        "p50_ms": percentile(values, 50) * 1e3,
        "p99_ms": percentile(values, 99) * 1e3,
        "max_ms": max(values) * 1e3 if values else float("nan"),
    }


def raise_fd_limit(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(wanted, soft)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (from /proc; Linux only)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric_value(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}\s+([0-9.eE+-]+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else float("nan")


# ---- database -------------------------------------------------------------------------------


class BenchDatabase:
    """A PostgreSQL database of our own for one benchmark run, dropped afterwards."""

    def __init__(self, server_url: str) -> None:
        import sqlalchemy as sa

        self._sa = sa
        self.server_url = sa.make_url(server_url)
        self.name = f"swarmhub_bench_{uuid.uuid4().hex[:10]}"
        self._admin = sa.create_engine(self.server_url, isolation_level="AUTOCOMMIT")
        with self._admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{self.name}"'))
        self.url = self.server_url.set(database=self.name).render_as_string(hide_password=False)
        self._engine = sa.create_engine(self.url, isolation_level="AUTOCOMMIT")

    def peer_row_writes(self) -> dict[str, float]:
        """Cumulative row updates/inserts on `peers` and commits in this database (pg_stat views)."""
        sa = self._sa
        with self._engine.connect() as connection:
            connection.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
            row = connection.execute(
                sa.text("SELECT n_tup_upd, n_tup_ins FROM pg_stat_user_tables WHERE relname = 'peers'")
            ).first()
            commits = connection.scalar(
                sa.text("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
            )
        return {
            "peer_updates": float(row[0]) if row else float("nan"),
            "peer_inserts": float(row[1]) if row else float("nan"),
            "commits": float(commits or 0),
        }

    def drop(self) -> None:
        self._engine.dispose()
        with self._admin.connect() as connection:
            connection.execute(self._sa.text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self._admin.dispose()


# ---- registration ---------------------------------------------------------------------------


async def register_peers(
    base_url: str, token: str, count: int, concurrency: int, announce: str
) -> dict[str, Any]:
    """`count` real registrations through the API, `concurrency` at a time, all announcing the
    one endpoint that answers the coordinator's reachability probe for every simulated peer."""
    semaphore = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    peers: list[tuple[int, str]] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits) as client:

        async def one(index: int) -> None:
            body = {
                "join_token": token,
                "listen_port": int(announce.rsplit(":", 1)[1]),
                "announce": announce,
                "device": "cpu",
                "data_plane_version": DATA_PLANE_VERSION,
                "device_name": "simulated",
                "throughput": round(random.uniform(5, 50), 2),
                "name": f"sim-{index}",
            }
            async with semaphore:
                started = time.perf_counter()
                response = await client.post("/api/peers/register", json=body)
                latencies.append(time.perf_counter() - started)
            response.raise_for_status()
            data = response.json()
            peers.append((data["peer_id"], data["credential"]))

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        elapsed = time.perf_counter() - started
    peers.sort()
    return {"peers": peers, "latencies": latencies, "elapsed_s": elapsed}


# ---- a simulated peer on the control channel -------------------------------------------------


class SimPeer:
    """Speaks the real control protocol: Hello, Heartbeats on a schedule, reads every push."""

    def __init__(self, ws_url: str, peer_id: int, credential: str) -> None:
        self.ws_url = ws_url
        self.peer_id = peer_id
        self.credential = credential
        self.connection: Any = None
        self.received: dict[str, int] = {}
        self.bytes_received = 0
        self.heartbeats_sent = 0
        self.heartbeat_interval_s = 1.0
        """As the coordinator's Welcome asks, like a real peer."""
        self.lags: list[float] = []
        self.closed: str | None = None
        self._welcomed = asyncio.Event()
        self._reply: asyncio.Future[float] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._beater: asyncio.Task[None] | None = None

    async def connect(self, timeout: float = 120.0) -> float:
        """Open the channel and say Hello; returns seconds until the stage assignment arrived."""
        from websockets.asyncio.client import connect

        from swarmhub.wire import Hello

        started = time.perf_counter()
        self.connection = await connect(
            self.ws_url, open_timeout=timeout, ping_interval=None, max_size=None, compression=None
        )
        await self.connection.send(
            Hello(peer_id=self.peer_id, credential=self.credential, throughput=10.0).model_dump_json()
        )
        self._reader = asyncio.create_task(self._read())
        await asyncio.wait_for(self._welcomed.wait(), timeout)
        return time.perf_counter() - started

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for raw in self.connection:
                self.bytes_received += len(raw)
                message = json.loads(raw)
                kind = message.get("type", "?")
                self.received[kind] = self.received.get(kind, 0) + 1
                if kind == "welcome":
                    self.heartbeat_interval_s = message["heartbeat_interval_s"]
                elif kind == "assignment":
                    self._welcomed.set()
                elif kind in ("no_work", "work") and self._reply is not None and not self._reply.done():
                    self._reply.set_result(time.perf_counter())
        except ConnectionClosed as exc:
            self.closed = f"{exc.rcvd.code if exc.rcvd else '?'} {exc.rcvd.reason if exc.rcvd else ''}"
        finally:
            if self.closed is None:
                self.closed = "reader ended"

    def start_heartbeats(self) -> None:
        """Beat at the interval the coordinator asked for, from a random phase within it (peers that
        joined over minutes are spread over the interval)."""
        self._beater = asyncio.create_task(self._beat(random.uniform(0, self.heartbeat_interval_s)))

    async def _beat(self, phase_s: float) -> None:
        from websockets.exceptions import ConnectionClosed

        from swarmhub.wire import Heartbeat

        due = time.monotonic() + phase_s
        with contextlib.suppress(ConnectionClosed):
            while True:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                self.lags.append(time.monotonic() - due)
                self.heartbeats_sent += 1
                beat = Heartbeat(throughput=10.0, queue_length=0, samples_done=self.heartbeats_sent)
                await self.connection.send(beat.model_dump_json())
                due += self.heartbeat_interval_s

    async def round_trip(self, timeout: float = 30.0) -> float:
        """Seconds from sending a WorkRequest to its NoWork/WorkGrant reply."""
        from swarmhub.wire import WorkRequest

        self._reply = asyncio.get_running_loop().create_future()
        started = time.perf_counter()
        await self.connection.send(WorkRequest().model_dump_json())
        arrived = await asyncio.wait_for(self._reply, timeout)
        return arrived - started

    async def close(self) -> None:
        from swarmhub.wire import Goodbye

        if self._beater is not None:
            self._beater.cancel()
        with contextlib.suppress(Exception):
            await self.connection.send(Goodbye().model_dump_json())
            await asyncio.wait_for(self.connection.close(), 5)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader


# ---- load generator process ------------------------------------------------------------------


def load_generator(
    ws_url: str,
    peers: list[tuple[int, str]],
    connect_concurrency: int,
    events: Any,
    mark: Any,
    stop: Any,
    sent: Any,
) -> None:
    """Child process: hold len(peers) control channels until `stop` is set; report via `events`."""
    raise_fd_limit(len(peers) * 2 + 256)
    asyncio.run(_load_generator(ws_url, peers, connect_concurrency, events, mark, stop, sent))


async def _load_generator(
    ws_url: str,
    peers: list[tuple[int, str]],
    connect_concurrency: int,
    events: Any,
    mark: Any,
    stop: Any,
    sent: Any,
) -> None:
    sims = [SimPeer(ws_url, pid, cred) for pid, cred in peers]
    semaphore = asyncio.Semaphore(connect_concurrency)
    connect_times: list[float] = []
    failures: list[str] = []

    async def open_one(sim: SimPeer) -> None:
        async with semaphore:
            try:
                connect_times.append(await sim.connect())
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}"[:200])
                return
        sim.start_heartbeats()

    started = time.perf_counter()
    await asyncio.gather(*(open_one(s) for s in sims))
    connect_elapsed = time.perf_counter() - started
    events.put(
        {
            "event": "connected",
            "connected": len(connect_times),
            "failures": failures[:5],
            "failure_count": len(failures),
            "connect_elapsed_s": connect_elapsed,
            "connect_times": connect_times,
        }
    )
    # Lags and CPU count from the start of the measured window (`mark`), not while connecting.
    while not mark.is_set() and not stop.is_set():
        await asyncio.sleep(0.05)
        sent.value = sum(s.heartbeats_sent for s in sims)
    for s in sims:
        s.lags.clear()
    cpu_start = time.process_time()
    while not stop.is_set():
        await asyncio.sleep(0.1)
        sent.value = sum(s.heartbeats_sent for s in sims)
    cpu_s = time.process_time() - cpu_start
    lags = [lag for s in sims for lag in s.lags]
    received: dict[str, int] = {}
    for s in sims:
        for kind, n in s.received.items():
            received[kind] = received.get(kind, 0) + n
    closed = [s.closed for s in sims if s.closed is not None]
    await asyncio.gather(*(s.close() for s in sims), return_exceptions=True)
    events.put(
        {
            "event": "done",
            "lags": lags,
            "received": received,
            "bytes_received": sum(s.bytes_received for s in sims),
            "closed_early": len(closed),
            "closed_reasons": sorted(set(closed))[:5],
            "cpu_s": cpu_s,
        }
    )


# ---- measurement (probes and API) ------------------------------------------------------------


async def measure(
    base_url: str,
    admin_token: str,
    run_id: int,
    probes: list[SimPeer],
    window_s: float,
    probe_interval_s: float,
    api_interval_s: float,
    api: bool = True,
) -> dict[str, list[float]]:
    """For `window_s`: WorkRequest round-trips from the probes and (if `api`) GETs of the run and
    its peers, side by side."""
    results: dict[str, list[float]] = {"round_trip": [], "get_run": [], "get_peers": []}
    deadline = time.monotonic() + window_s
    headers = {"Authorization": f"Bearer {admin_token}"}

    async def probe_loop() -> None:
        index = 0
        while time.monotonic() < deadline:
            results["round_trip"].append(await probes[index % len(probes)].round_trip())
            index += 1
            await asyncio.sleep(probe_interval_s)

    async def api_loop(client: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            for key, path in (("get_run", f"/api/runs/{run_id}"), ("get_peers", f"/api/runs/{run_id}/peers")):
                started = time.perf_counter()
                response = await client.get(path)
                results[key].append(time.perf_counter() - started)
                response.raise_for_status()
            await asyncio.sleep(api_interval_s)

    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as client:
        await asyncio.gather(probe_loop(), *([api_loop(client)] if api else []))
    return results


def coordinator_metrics(base_url: str) -> dict[str, float]:
    text = httpx.get(f"{base_url}/metrics", timeout=60).text
    return {
        "heartbeats": metric_value(text, "swarmhub_heartbeats_total"),
        "connected": metric_value(text, "swarmhub_peers_connected"),
    }


# ---- rebalancing decision --------------------------------------------------------------------


def time_stage_decision(num_peers: int, num_stages: int, repeats: int) -> dict[str, Any]:
    """Time one placement decision over `num_peers` synthetic peers.

    Uses server.policies.rebalance when it exists; otherwise server.policies.stage_choice.choose_stage
    fed the per-stage sums the coordinator computes from its live peers (as LiveSwarm._choose_stage
    does), which is the only stage policy the coordinator has today.
    """
    rng = random.Random(0)
    peers = [(rng.randrange(num_stages), rng.uniform(1, 100)) for _ in range(num_peers)]
    try:
        import server.policies.rebalance as rebalance
    except ImportError:
        rebalance = None
    if rebalance is not None:
        decide, policy = _rebalance_call(rebalance, peers, num_stages)
    else:
        from server.policies.stage_choice import choose_stage

        policy = "server.policies.stage_choice.choose_stage (rebalancing policy not available)"

        def decide() -> Any:
            throughputs = [0.0] * num_stages
            counts = [0] * num_stages
            for stage, rate in peers:
                throughputs[stage] += rate
                counts[stage] += 1
            return choose_stage(throughputs, counts, None)

    decide()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        decision = decide()
        times.append(time.perf_counter() - started)
    return {"policy": policy, "times": times, "decision": repr(decision)[:200]}


def _rebalance_call(module: Any, peers: list[tuple[int, float]], num_stages: int) -> tuple[Any, str]:
    """server.policies.rebalance.choose_moves over PeerLoad records; the last stage is made the
    bottleneck (its peers are 3x slower) so the policy has to plan a whole new placement."""
    loads = [
        module.PeerLoad(
            peer_id=index,
            stage=stage,
            throughput=rate / 3 if stage == num_stages - 1 else rate,
            queue_length=index % 4,
        )
        for index, (stage, rate) in enumerate(peers)
    ]
    return (
        lambda: module.choose_moves(loads, num_stages, horizon_s=30.0)
    ), "server.policies.rebalance.choose_moves"


# ---- the benchmark ---------------------------------------------------------------------------


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    from launch.local_swarm import LocalSwarm

    database = BenchDatabase(args.postgres_server) if args.database == "postgres" else None
    swarm = LocalSwarm(
        database_url=database.url if database else None,
        heartbeat_timeout_s=args.heartbeat_timeout,
        heartbeat_interval_s=args.heartbeat_interval,
    )
    context = mp.get_context("spawn")
    children: list[Any] = []
    # Simulated peers have no data plane of their own: one real endpoint answers the coordinator's
    # reachability probe for all of them, so they are placed on stages as reachable peers are.
    responder = ProbeResponder()
    try:
        swarm.start()
        assert swarm.coordinator is not None
        coordinator_pid = swarm.coordinator.pid
        run = swarm.create_run(name="coordinator load", num_stages=args.stages)
        admin_token = swarm.client.headers["Authorization"].removeprefix("Bearer ")
        ws_url = swarm.url.replace("http://", "ws://") + "/ws/peer"

        total = args.peers + args.probes
        issued = swarm.client.post(
            f"/api/runs/{run['id']}/tokens", json={"label": "load", "max_peers": total}
        )
        issued.raise_for_status()
        print(f"registering {total} peers ({args.register_concurrency} at a time)...", flush=True)
        registered = asyncio.run(
            register_peers(
                swarm.url, issued.json()["token"], total, args.register_concurrency, responder.address
            )
        )
        peers = registered["peers"]
        for peer_id, credential in peers:
            responder.know(peer_id, credential)
        probe_peers, load_peers = peers[: args.probes], peers[args.probes :]

        async def phase(load: bool) -> dict[str, Any]:
            probes = [SimPeer(ws_url, pid, cred) for pid, cred in probe_peers]
            for probe in probes:
                await probe.connect()
                probe.start_heartbeats()
            await asyncio.sleep(args.settle)
            # The same probes without API traffic: what the round-trip is when no HTTP request
            # competes for the coordinator's interpreter.
            quiet = await measure(
                swarm.url,
                admin_token,
                run["id"],
                probes,
                args.quiet_window,
                args.probe_interval,
                args.api_interval,
                api=False,
            )
            before = await asyncio.to_thread(coordinator_metrics, swarm.url)
            pg_before = await asyncio.to_thread(database.peer_row_writes) if database else {}
            sent_before = sum(v.value for v in sent_counters)
            probe_sent_before = sum(p.heartbeats_sent for p in probes)
            if load:
                mark.set()
            cpu_before, wall_before = process_cpu_s(coordinator_pid), time.monotonic()
            samples = await measure(
                swarm.url, admin_token, run["id"], probes, args.window, args.probe_interval, args.api_interval
            )
            wall = time.monotonic() - wall_before
            cpu = process_cpu_s(coordinator_pid) - cpu_before
            sent = sum(v.value for v in sent_counters) - sent_before
            after = await asyncio.to_thread(coordinator_metrics, swarm.url)
            pg_after = await asyncio.to_thread(database.peer_row_writes) if database else {}
            probe_sent = sum(p.heartbeats_sent for p in probes) - probe_sent_before
            probe_lags = [lag for p in probes for lag in p.lags]
            await asyncio.gather(*(p.close() for p in probes))
            return {
                "load": load,
                "samples": samples,
                "quiet_round_trip": quiet["round_trip"],
                "wall_s": wall,
                "coordinator_cpu_s": cpu,
                "heartbeats_absorbed": after["heartbeats"] - before["heartbeats"],
                "load_heartbeats_sent": sent,
                "connected": after["connected"],
                "probe_heartbeats_sent": probe_sent,
                "probe_lags": probe_lags,
                "pg": {k: pg_after[k] - pg_before[k] for k in pg_before},
            }

        sent_counters: list[Any] = []
        print(f"idle phase ({args.probes} probe peers, {args.window:.0f} s)...", flush=True)
        idle = asyncio.run(phase(load=False))

        print(f"opening {len(load_peers)} control channels in {args.clients} load process(es)...", flush=True)
        events = context.Queue()
        mark, stop = context.Event(), context.Event()
        shares = [load_peers[i :: args.clients] for i in range(args.clients)]
        sent_counters = [context.Value("q", 0, lock=False) for _ in shares]
        for share, counter in zip(shares, sent_counters, strict=True):
            child = context.Process(
                target=load_generator,
                args=(ws_url, share, args.connect_concurrency, events, mark, stop, counter),
                daemon=True,
            )
            child.start()
            children.append(child)
        connected = [events.get(timeout=args.connect_timeout) for _ in children]
        connect_times = [t for c in connected for t in c.pop("connect_times")]
        connect_elapsed = max(c["connect_elapsed_s"] for c in connected)
        connect_failures = sum(c["failure_count"] for c in connected)
        print(
            f"  {sum(c['connected'] for c in connected)} connected in {connect_elapsed:.1f} s,"
            f" {connect_failures} failed {[f for c in connected for f in c['failures']][:3]}",
            flush=True,
        )

        print(f"load phase ({args.window:.0f} s)...", flush=True)
        loaded = asyncio.run(phase(load=True))
        stop.set()
        done = [events.get(timeout=120) for _ in children]
        for child in children:
            child.join(timeout=30)
        coordinator_alive = swarm.coordinator.poll() is None
        log_tail = (swarm.workdir / "coordinator.log").read_text(errors="replace")[-3000:]
    finally:
        for child in children:
            if child.is_alive():
                child.terminate()
        swarm.stop()
        responder.close()
        if database is not None:
            database.drop()

    return {
        "registered": registered,
        "idle": idle,
        "loaded": loaded,
        "connect_times": connect_times,
        "connect_elapsed_s": connect_elapsed,
        "connect_failures": connect_failures,
        "load_done": done,
        "coordinator_alive": coordinator_alive,
        "coordinator_errors": [
            line for line in log_tail.splitlines() if "Error" in line or "Traceback" in line
        ][:10],
    }


def build_rows(result: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    n = args.peers

    def row(metric: str, phase: str, values: dict[str, Any], **extra: Any) -> None:
        rows.append({"metric": metric, "phase": phase, "peers": n, **values, **extra})

    reg = result["registered"]
    row(
        "register_peer",
        "setup",
        summary_ms(reg["latencies"]),
        per_s=len(reg["latencies"]) / reg["elapsed_s"],
    )
    row(
        "open_channel",
        "setup",
        summary_ms(result["connect_times"]),
        per_s=len(result["connect_times"]) / max(result["connect_elapsed_s"], 1e-9),
        failures=result["connect_failures"],
    )
    for phase_name in ("idle", "loaded"):
        phase = result[phase_name]
        label = f"{phase_name} ({n if phase_name == 'loaded' else 0} channels + {args.probes} probes)"
        for key, metric in (
            ("round_trip", "control_round_trip"),
            ("get_run", "GET /api/runs/{id}"),
            ("get_peers", "GET /api/runs/{id}/peers"),
        ):
            row(metric, label, summary_ms(phase["samples"][key]))
        row("control_round_trip (no API traffic)", label, summary_ms(phase["quiet_round_trip"]))
        offered = phase["load_heartbeats_sent"] + phase["probe_heartbeats_sent"]
        row(
            "heartbeats",
            label,
            {"n": int(phase["heartbeats_absorbed"])},
            per_s=phase["heartbeats_absorbed"] / phase["wall_s"],
            absorbed_over_sent=phase["heartbeats_absorbed"] / offered if offered else float("nan"),
            coordinator_cpu=phase["coordinator_cpu_s"] / phase["wall_s"],
            peer_row_updates_per_s=phase["pg"].get("peer_updates", float("nan")) / phase["wall_s"],
            db_commits_per_s=phase["pg"].get("commits", float("nan")) / phase["wall_s"],
        )
    lags = [lag for d in result["load_done"] for lag in d["lags"]]
    row(
        "client_heartbeat_lag",
        "loaded",
        summary_ms(lags),
        client_cpu=sum(d["cpu_s"] for d in result["load_done"]) / max(result["loaded"]["wall_s"], 1e-9),
        closed_early=sum(d["closed_early"] for d in result["load_done"]),
    )
    return rows


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--peers", type=int, default=1000, help="simulated peers on control channels")
    parser.add_argument("--probes", type=int, default=8, help="peers that time WorkRequest round-trips")
    parser.add_argument("--clients", type=int, default=1, help="load-generator processes")
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--window", type=float, default=30.0, help="seconds of each measured phase")
    parser.add_argument(
        "--quiet-window", type=float, default=10.0, help="seconds of probes without API calls"
    )
    parser.add_argument("--settle", type=float, default=3.0, help="seconds before each window")
    parser.add_argument("--probe-interval", type=float, default=0.05)
    parser.add_argument("--api-interval", type=float, default=0.1)
    parser.add_argument("--register-concurrency", type=int, default=16)
    parser.add_argument("--connect-concurrency", type=int, default=16)
    parser.add_argument("--connect-timeout", type=float, default=900.0)
    parser.add_argument("--heartbeat-timeout", type=float, default=3600.0)
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        default=1.0,
        help="the coordinator's SWARMHUB_HEARTBEAT_INTERVAL_S; peers beat as its Welcome says",
    )
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument(
        "--postgres-server",
        default=os.environ.get("SWARMHUB_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_SERVER),
        help="a PostgreSQL URL; the benchmark creates (and drops) a database of its own there",
    )
    parser.add_argument("--decision-peers", type=int, default=10_000)
    parser.add_argument("--decision-stages", type=int, default=8)
    args = parser.parse_args(argv)
    if args.smoke:
        args.peers, args.probes, args.window, args.settle, args.quiet_window = 20, 2, 3.0, 1.0, 1.0
        args.decision_peers = 10_000
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    raise_fd_limit(2 * (args.peers + args.probes) + 256)
    started = time.time()
    decision = time_stage_decision(args.decision_peers, args.decision_stages, 20 if args.smoke else 200)
    print(
        f"decision over {args.decision_peers} peers: p50 {percentile(decision['times'], 50) * 1e3:.2f} ms",
        flush=True,
    )
    result = run_benchmark(args)
    rows = build_rows(result, args)
    rows.append(
        {
            "metric": "stage_decision",
            "phase": f"{args.decision_peers} peers, {args.decision_stages} stages",
            "peers": args.decision_peers,
            **summary_ms(decision["times"]),
            "policy": decision["policy"],
        }
    )
    columns = [
        "metric",
        "phase",
        "n",
        "p50_ms",
        "p99_ms",
        "max_ms",
        "per_s",
        "absorbed_over_sent",
        "coordinator_cpu",
        "peer_row_updates_per_s",
        "client_cpu",
    ]
    print_table(rows, columns)
    loaded, idle = result["loaded"], result["idle"]
    ratios = {
        name: statistics.median(loaded["samples"][key]) / statistics.median(idle["samples"][key])
        for name, key in (("round_trip", "round_trip"), ("get_run", "get_run"), ("get_peers", "get_peers"))
    }
    print("loaded/idle p50 ratios:", {k: round(v, 2) for k, v in ratios.items()})
    print(f"coordinator alive at the end: {result['coordinator_alive']}")
    if result["coordinator_errors"]:
        print("coordinator log errors:", *result["coordinator_errors"], sep="\n  ")

    def plot(ax: Any) -> None:
        labels = ["control round-trip", "GET run", "GET run peers"]
        keys = ["round_trip", "get_run", "get_peers"]
        x = range(len(keys))
        for offset, (phase, name) in enumerate(((idle, "idle"), (loaded, f"{args.peers} peers"))):
            p50 = [percentile(phase["samples"][k], 50) * 1e3 for k in keys]
            p99 = [percentile(phase["samples"][k], 99) * 1e3 for k in keys]
            xs = [i + (offset - 0.5) * 0.38 for i in x]
            ax.bar(xs, p99, width=0.36, alpha=0.35, color=f"C{offset}")
            ax.bar(xs, p50, width=0.36, color=f"C{offset}", label=f"{name} (p50 solid, p99 light)")
        ax.set_xticks(list(x), labels)
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        ax.set_title(f"Coordinator latency, idle vs {args.peers} heartbeating peers ({args.database})")
        ax.legend()

    config = {
        key: (str(value) if isinstance(value, Path) else value)
        for key, value in vars(args).items()
        if key != "postgres_server"
    }
    config.update(
        started=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        heartbeat_interval_s=args.heartbeat_interval,
        loaded_over_idle_p50=ratios,
        coordinator_alive=result["coordinator_alive"],
        coordinator_errors=result["coordinator_errors"],
        messages_received_by_load_peers=[d["received"] for d in result["load_done"]],
        bytes_received_by_load_peers=sum(d["bytes_received"] for d in result["load_done"]),
        closed_reasons=[r for d in result["load_done"] for r in d["closed_reasons"]],
        pg_deltas={"idle": idle["pg"], "loaded": loaded["pg"]},
        decision=decision["decision"],
        cpus=len(os.sched_getaffinity(0)),
    )
    name = "coordinator_load_smoke" if args.smoke else "coordinator_load"
    path = write_results(name, config=config, rows=rows, plot=plot, out_dir=args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

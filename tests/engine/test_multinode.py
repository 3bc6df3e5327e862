"""Multi-node stand-in: headless workers join the leader over TCP, and failures propagate.

As vLLM's multi-node serving (``--nnodes``, ``--node-rank``, ``--headless``) behaves: the leader is
healthy only when every rank joined; losing a worker kills the leader (non-zero); losing the
leader kills the workers.
"""

from __future__ import annotations

import datetime as dt
import signal
import time
from pathlib import Path

from .conftest import EngineProc, StartEngine, free_port


def group(
    start_engine: StartEngine, nnodes: int, master_port: int, rank: int, env: dict[str, str] | None = None
) -> EngineProc:
    args = [
        "org/big",
        "--tensor-parallel-size",
        "2",
        "--pipeline-parallel-size",
        str(nnodes),
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        str(nnodes),
        "--node-rank",
        str(rank),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(master_port),
    ]
    if rank:
        args.append("--headless")
    return start_engine(*args, env=env, wait=False)


def assert_stays(engine: EngineProc, status: int | None, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert engine.health() == status
        time.sleep(0.05)


def wait_health(engine: EngineProc, status: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while engine.health() != status:
        assert time.monotonic() < deadline, engine.log()
        time.sleep(0.05)


def test_leader_is_healthy_only_when_all_ranks_joined(start_engine: StartEngine) -> None:
    master_port = free_port()
    leader = group(start_engine, 3, master_port, 0)
    leader.wait_listening()
    assert_stays(leader, 503, 0.5)

    worker1 = group(start_engine, 3, master_port, 1)
    wait_for_log(leader, "rank 1 joined")
    assert_stays(leader, 503, 0.5)

    worker2 = group(start_engine, 3, master_port, 2)
    wait_health(leader, 200)

    # A worker going away takes the whole group down, as vLLM's executor does.
    worker2.proc.send_signal(signal.SIGKILL)
    assert leader.wait_exit(10) != 0
    assert "worker rank 2 went away" in leader.log()
    # ...and the remaining worker follows its leader.
    assert worker1.wait_exit(10) != 0
    assert "leader went away" in worker1.log()


def test_worker_started_first_waits_for_the_leader(start_engine: StartEngine) -> None:
    master_port = free_port()
    worker = group(start_engine, 2, master_port, 1)
    time.sleep(0.5)
    assert worker.proc.poll() is None
    leader = group(start_engine, 2, master_port, 0)
    wait_health(leader, 200)

    leader.proc.send_signal(signal.SIGKILL)
    assert worker.wait_exit(10) != 0


def test_a_worker_with_the_wrong_group_size_is_refused(start_engine: StartEngine) -> None:
    master_port = free_port()
    leader = group(start_engine, 2, master_port, 0)
    leader.wait_listening()
    stray = group(start_engine, 3, master_port, 1)
    assert stray.wait_exit(10) == 1
    assert "refused" in stray.log()
    assert leader.health() == 503
    assert leader.proc.poll() is None


def test_signal_stops_a_worker_cleanly(start_engine: StartEngine) -> None:
    master_port = free_port()
    leader = group(start_engine, 2, master_port, 0)
    worker = group(start_engine, 2, master_port, 1)
    wait_health(leader, 200)
    leader.proc.send_signal(signal.SIGTERM)
    assert leader.wait_exit(10) == 0
    assert worker.wait_exit(10) != 0


def test_a_rank_fails_on_request_a_number_of_times(start_engine: StartEngine, tmp_path: Path) -> None:
    """``SPARKRUN_ENGINE_FAIL_*``: the worker prints its last words and exits with the status
    asked for, after it joined; the leader notices only after the heartbeat timeout (so the
    worker's failure is the group's first); with a ledger, only so many times."""
    ledger = tmp_path / "ledger"
    env = {
        "SPARKRUN_ENGINE_FAIL_RANK": "1",
        "SPARKRUN_ENGINE_FAIL_AFTER": "0.2",
        "SPARKRUN_ENGINE_FAIL_CODE": "7",
        "SPARKRUN_ENGINE_FAIL_MESSAGE": "last words",
        "SPARKRUN_ENGINE_FAIL_TIMES": "1",
        "SPARKRUN_ENGINE_FAIL_LEDGER": str(ledger),
        "SPARKRUN_ENGINE_HEARTBEAT_SECONDS": "0.2",
    }
    master_port = free_port()
    leader = group(start_engine, 2, master_port, 0, env)
    worker = group(start_engine, 2, master_port, 1, env)
    assert worker.wait_exit(10) == 7
    assert "last words" in worker.log()
    assert "rank 1 fails on request (exit status 7)" in worker.log()
    assert leader.wait_exit(10) == 1
    # not at once: after five missed beats (1 s here). NB: judged by the logs' own times, a lower
    # bound a slow machine only widens (a poll right after the worker's exit is a race on it)
    failed = _logged_at(worker, "rank 1 fails on request")
    noticed = _logged_at(leader, "worker rank 1 went away; the leader exits")
    assert noticed - failed >= dt.timedelta(seconds=0.9), (failed, noticed)
    assert ledger.read_text() == "failed\n"
    # the ledger is full: the next group serves
    master_port = free_port()
    leader = group(start_engine, 2, master_port, 0, env)
    worker = group(start_engine, 2, master_port, 1, env)
    wait_health(leader, 200)
    wait_for_log(worker, "rank 1 failed 1 times on request: it fails no more")
    assert worker.proc.poll() is None
    assert leader.health() == 200


def wait_for_log(engine: EngineProc, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while text not in engine.log():
        assert time.monotonic() < deadline, engine.log()
        time.sleep(0.05)


def _logged_at(engine: EngineProc, text: str) -> dt.datetime:
    """When ``engine`` logged its first line containing ``text`` (the stand-in's ``asctime``:
    ``YYYY-MM-DD HH:MM:SS,mmm``, after the level)."""
    line = next((line for line in engine.log().splitlines() if text in line), None)
    assert line is not None, engine.log()
    stamp = " ".join(line.split(" ")[1:3])
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")

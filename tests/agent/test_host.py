"""The host sampler on /proc files (a written one, and this machine's)."""

from __future__ import annotations

from pathlib import Path

from sparkrun_operator.agent.host import HostSampler, cpu_times, memory, net_bytes

NETDEV = """Inter-|   Receive |  Transmit
 face |bytes    packets ...|bytes    packets ...
    lo: {lo} 10 0 0 0 0 0 0 {lo} 10 0 0 0 0 0 0
  eth0: {rx} 10 0 0 0 0 0 0 {tx} 10 0 0 0 0 0 0
  ib0: {rx} 10 0 0 0 0 0 0 {tx} 10 0 0 0 0 0 0
"""


def _write(root: Path, *, busy: int, idle: int, rx: int, tx: int) -> None:
    (root / "1" / "net").mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\nintr 1\n")
    (root / "meminfo").write_text(
        "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    400 kB\n"
    )
    (root / "1" / "net" / "dev").write_text(NETDEV.format(lo=999999, rx=rx, tx=tx))


def test_rates_between_two_samples(tmp_path: Path) -> None:
    now = [10.0]
    sampler = HostSampler(tmp_path, clock=lambda: now[0])
    _write(tmp_path, busy=100, idle=300, rx=1000, tx=500)
    first = sampler.sample()
    assert first.cpu_percent is None
    assert first.rx_bytes_per_second is None
    assert (first.memory_used_bytes, first.memory_total_bytes) == (600 * 1024, 1000 * 1024)
    _write(tmp_path, busy=150, idle=350, rx=5000, tx=1500)
    now[0] = 12.0
    second = sampler.sample()
    assert second.cpu_percent == 50.0
    # two interfaces each received 4000 B and sent 1000 B in 2 s; lo does not count
    assert (second.rx_bytes_per_second, second.tx_bytes_per_second) == (4000.0, 1000.0)


def test_counters_that_went_back_or_files_missing_give_none(tmp_path: Path) -> None:
    sampler = HostSampler(tmp_path)
    empty = sampler.sample()
    assert empty.model_dump(exclude_none=True) == {}
    _write(tmp_path, busy=100, idle=300, rx=1000, tx=500)
    sampler.sample()
    _write(tmp_path, busy=10, idle=30, rx=10, tx=5)  # a reboot, or a counter wrap
    again = sampler.sample()
    assert again.cpu_percent is None
    assert again.rx_bytes_per_second is None


def test_parsers_refuse_garbage() -> None:
    assert cpu_times("cpu  a b c d\n") is None
    assert memory("MemTotal: x kB\n") is None
    assert net_bytes("h\nh\n  eth0: nope\n") is None


def test_this_machines_proc() -> None:
    sampler = HostSampler()
    sampler.sample()
    sample = sampler.sample()
    assert sample.memory_total_bytes is not None
    assert sample.memory_total_bytes > 0
    assert sample.memory_used_bytes is not None
    assert 0 < sample.memory_used_bytes <= sample.memory_total_bytes

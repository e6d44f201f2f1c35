"""CPU time of processes, for the PostgreSQL benchmark scripts beside this file."""

import os
import resource

TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pids):
    """CPU seconds so far of each of `pids` that still runs."""
    seconds = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            seconds[pid] = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
        except (FileNotFoundError, ProcessLookupError):
            pass
    return seconds


def spent(before, after):
    """CPU seconds between two samples (processes started meanwhile count from zero)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def postgres_pids():
    """Every PostgreSQL process on the machine (of every cluster)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() == "postgres":
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def children_cpu():
    """CPU seconds of the children reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime

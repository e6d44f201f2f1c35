"""The harness's network: one network namespace per host (each Tenax node, each PostgreSQL
server), joined by veth pairs to a bridge in the root namespace, where the clients and the
webhook receiver live. Faults are made inside a host's namespace: nftables drops (both ways
or one way, whole or a share of packets) and a slow link (netem where the kernel has it, else a
token bucket).

Everything made here is named with the run's prefix and removed by `Network.remove`, also
after a failed run (`run.sh` calls it on exit)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

BRIDGE_IP = "10.77.0.1"
PREFIX_LEN = 24


def sh(*args: str, check: bool = True, ns: str | None = None) -> subprocess.CompletedProcess:
    """Runs a command (in namespace `ns`), capturing its output; raises on failure if `check`."""
    cmd = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


@dataclass
class Host:
    """A host of the network: its namespace, its address and its interface inside."""

    name: str
    ip: str
    ns: str
    dev: str


@dataclass
class Network:
    prefix: str = "tfx"
    hosts: dict[str, Host] = field(default_factory=dict)
    netem: bool = False

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    def create(self, names_and_ips: list[tuple[str, str]]) -> None:
        self.remove()
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{BRIDGE_IP}/{PREFIX_LEN}", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for name, ip in names_and_ips:
            ns = f"{self.prefix}-{name}"
            outside, inside = f"{self.prefix}h{name}", f"{self.prefix}c{name}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            sh("ip", "link", "set", inside, "netns", ns)
            sh("ip", "link", "set", outside, "master", self.bridge)
            sh("ip", "link", "set", outside, "up")
            sh("ip", "addr", "add", f"{ip}/{PREFIX_LEN}", "dev", inside, ns=ns)
            sh("ip", "link", "set", inside, "up", ns=ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
            # Every fault is a rule of this table: flushing it heals the host.
            sh("nft", "add", "table", "inet", "tfx", ns=ns)
            sh("nft", "add", "chain", "inet", "tfx", "in",
               "{ type filter hook input priority 0; }", ns=ns)
            sh("nft", "add", "chain", "inet", "tfx", "out",
               "{ type filter hook output priority 0; }", ns=ns)
            self.hosts[name] = Host(name, ip, ns, inside)
        probe = next(iter(self.hosts.values()))
        tried = sh("tc", "qdisc", "add", "dev", probe.dev, "root", "netem", "delay", "1ms",
                   ns=probe.ns, check=False)
        self.netem = tried.returncode == 0
        if self.netem:
            sh("tc", "qdisc", "del", "dev", probe.dev, "root", ns=probe.ns, check=False)

    def remove(self) -> None:
        """Removes every namespace and link of this prefix (also those of an earlier run)."""
        listed = sh("ip", "netns", "list", check=False).stdout.split("\n")
        for line in listed:
            ns = line.split(" ")[0]
            if ns.startswith(f"{self.prefix}-"):
                sh("ip", "netns", "del", ns, check=False)
        # A namespace goes lazily, and its veth pairs with it: delete what is left by name.
        for line in sh("ip", "-o", "link", "show", check=False).stdout.split("\n"):
            parts = line.split(": ")
            if len(parts) > 1:
                name = parts[1].split("@")[0]
                if name.startswith(f"{self.prefix}h") or name == self.bridge:
                    sh("ip", "link", "del", name, check=False)
        self.hosts.clear()

    # --- faults -----------------------------------------------------------------------------

    def drop(self, host: str, peers: list[str], direction: str = "both", share: int = 100) -> None:
        """Drops `share` % of `host`'s packets to (`out`), from (`in`) or both ways with `peers`
        (host names, or addresses such as the bridge's, where the clients are)."""
        h = self.hosts[host]
        ips = [self.hosts[p].ip if p in self.hosts else p for p in peers]
        addresses = "{ " + ", ".join(ips) + " }"
        sample = [] if share >= 100 else ["numgen", "random", "mod", "100", "<", str(share)]
        if direction in ("both", "out"):
            sh("nft", "add", "rule", "inet", "tfx", "out", "ip", "daddr", addresses, *sample,
               "drop", ns=h.ns)
        if direction in ("both", "in"):
            sh("nft", "add", "rule", "inet", "tfx", "in", "ip", "saddr", addresses, *sample,
               "drop", ns=h.ns)

    def slow(self, host: str, delay_ms: int) -> str:
        """Slows `host`'s link: netem's delay where the kernel has it, else a token bucket
        that queues what goes beyond 1 Mbit/s. Returns which."""
        h = self.hosts[host]
        if self.netem:
            sh("tc", "qdisc", "replace", "dev", h.dev, "root", "netem", "delay",
               f"{delay_ms}ms", f"{delay_ms // 4}ms", ns=h.ns)
            return f"netem {delay_ms} ms"
        sh("tc", "qdisc", "replace", "dev", h.dev, "root", "tbf", "rate", "1mbit", "burst",
           "32kbit", "latency", f"{delay_ms}ms", ns=h.ns)
        return f"tbf 1 Mbit/s, {delay_ms} ms queue"

    def heal(self, host: str) -> None:
        h = self.hosts[host]
        sh("nft", "flush", "table", "inet", "tfx", ns=h.ns)
        sh("tc", "qdisc", "del", "dev", h.dev, "root", ns=h.ns, check=False)

    def heal_all(self) -> None:
        for name in self.hosts:
            self.heal(name)

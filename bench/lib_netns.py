"""bench/lib_netns.py — two network namespaces joined by a veth pair, for benchmarks that
measure TCP between "hosts" on one machine (root needed).

    pair = NamespacePair("rnixl", "rnx", 196)   # namespaces rnixl<tag>a/b, devices rnx0/1
    pair.setup(wait_until_up=True)
    ... pair.ns[0], pair.addr[1] ...
    pair.teardown()

The tag (from the process id) keeps two runs from colliding; setup removes namespaces
of an earlier run with the same names first.
"""
import os
import subprocess
import sys
import time


def sh(*argv, check=True):
    """Runs a command; its stdout, or exit with its stderr when it fails and `check`."""
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r.stdout


class NamespacePair:
    def __init__(self, ns_prefix, dev_prefix, subnet):
        tag = str(os.getpid() % 200 + 20)
        self.ns = [f"{ns_prefix}{tag}a", f"{ns_prefix}{tag}b"]
        self.dev = [f"{dev_prefix}0", f"{dev_prefix}1"]
        self.addr = [f"10.{subnet}.{tag}.1", f"10.{subnet}.{tag}.2"]

    def setup(self, wait_until_up=False):
        """Makes both namespaces and the veth pair, addressed /24. With `wait_until_up`,
        waits (at most 10 s) for each end's carrier and for its addresses to leave the
        tentative state: some programs (UCX) refuse a device that is not running yet."""
        for n in self.ns:
            sh("ip", "netns", "del", n, check=False)
            sh("ip", "netns", "add", n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
        sh("ip", "-n", self.ns[0], "link", "add", self.dev[0], "type", "veth", "peer", "name", self.dev[1],
           "netns", self.ns[1])
        for i in range(2):
            sh("ip", "-n", self.ns[i], "addr", "add", self.addr[i] + "/24", "dev", self.dev[i])
            sh("ip", "-n", self.ns[i], "link", "set", self.dev[i], "up")
        for i in range(2 if wait_until_up else 0):
            for _ in range(100):
                link = sh("ip", "-n", self.ns[i], "-o", "link", "show", self.dev[i])
                tentative = "tentative" in sh("ip", "-n", self.ns[i], "-o", "addr", "show", self.dev[i])
                if "LOWER_UP" in link and not tentative:
                    break
                time.sleep(0.1)
            else:
                sys.exit(f"{self.dev[i]} in {self.ns[i]} did not come up")

    def teardown(self):
        for n in self.ns:
            sh("ip", "netns", "del", n, check=False)

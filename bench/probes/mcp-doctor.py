"""How fast `memscape mcp` answers a doctor call on a large file once it is open, and what the
server holds: `python bench/probes/mcp-doctor.py FILE [MEMSCAPE]` (the `mcp` package from PyPI;
scripts/test's environment target/python/test has it). Prints the open, the first doctor call
(which runs the doctor's analyses), a second one (answered from what the first kept), the
command line's `memscape doctor --json` on the same file as the baseline, and the server's
peak resident memory beside the file's size.
"""

import asyncio
import os
import subprocess
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def rss_peak_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def main(path: str, exe: str) -> None:
    size = os.path.getsize(path) / 1e6
    t = time.perf_counter()
    subprocess.run([exe, "doctor", "--json", path], check=True, capture_output=True)
    cli = time.perf_counter() - t
    params = StdioServerParameters(command=exe, args=["mcp"])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            t = time.perf_counter()
            await s.call_tool("open", {"path": path})
            opened = time.perf_counter() - t
            times = []
            for _ in range(2):
                t = time.perf_counter()
                res = await s.call_tool("doctor", {"path": path})
                assert not res.is_error, res.content
                times.append(time.perf_counter() - t)
            pid = int(subprocess.run(["pgrep", "-n", "-f", f"{exe} mcp"], capture_output=True, text=True).stdout.split()[0])
            rss = rss_peak_mb(pid)
    print(f"file {size:.0f} MB; open {opened * 1000:.0f} ms; doctor after the open: first {times[0] * 1000:.0f} ms, "
          f"again {times[1] * 1000:.1f} ms; baseline `memscape doctor --json` (read + analyse) {cli * 1000:.0f} ms; "
          f"server peak RSS {rss:.0f} MB")


asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "memscape"))

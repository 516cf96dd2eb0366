"""The baseline of Antler's MCP benchmark: the Python `mcp` client calling server-everything's
`echo` over stdio directly. Prints one JSON line: p50/p99 in microseconds one call at a time,
calls/s one at a time, and calls/s with `inflight` calls in flight.
Usage: bench_client.py SERVER_COMMAND N INFLIGHT"""
import json
import statistics
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(command: str, n: int, inflight: int) -> None:
    params = StdioServerParameters(command=command, args=["stdio"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(50):
                await session.call_tool("echo", {"message": "warm"})
            lat = []
            t0 = time.perf_counter()
            for i in range(n):
                t = time.perf_counter()
                await session.call_tool("echo", {"message": f"m{i}"})
                lat.append((time.perf_counter() - t) * 1e6)
            seq_rate = n / (time.perf_counter() - t0)

            left = [n]

            async def worker():
                while left[0] > 0:
                    left[0] -= 1
                    await session.call_tool("echo", {"message": "c"})

            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for _ in range(inflight):
                    tg.start_soon(worker)
            conc_rate = n / (time.perf_counter() - t0)
    lat.sort()
    print(json.dumps({
        "p50_us": statistics.median(lat),
        "p99_us": lat[int(len(lat) * 0.99) - 1],
        "seq_calls_per_s": seq_rate,
        "concurrent_calls_per_s": conc_rate,
    }))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))

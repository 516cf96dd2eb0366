"""The baseline of Antler's MCP benchmark: the Python `mcp` client calling an `echo` tool
directly: server-everything's over stdio, or, with `--url URL --token TOKEN`, an HTTP server's
(streamable HTTP) with `Authorization: Bearer TOKEN` on every request. Prints one JSON line:
p50/p99 in microseconds one call at a time, calls/s one at a time, and calls/s with
`inflight` calls in flight.
Usage: bench_client.py SERVER_COMMAND N INFLIGHT
       bench_client.py --url URL --token TOKEN N INFLIGHT"""
import json
import statistics
import sys
import time
from contextlib import asynccontextmanager

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


@asynccontextmanager
async def connect(command: str | None, url: str | None, token: str | None):
    if url is None:
        params = StdioServerParameters(command=command, args=["stdio"])
        async with stdio_client(params) as streams:
            yield streams[0], streams[1]
        return
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(url, http_client=http) as streams:
        yield streams[0], streams[1]


async def main(command: str | None, url: str | None, token: str | None, n: int, inflight: int) -> None:
    async with connect(command, url, token) as (read, write):
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
    args = sys.argv[1:]
    url = token = command = None
    if args and args[0] == "--url":
        url, token = args[1], args[3]
        args = args[4:]
    else:
        command = args.pop(0)
    anyio.run(main, command, url, token, int(args[0]), int(args[1]))

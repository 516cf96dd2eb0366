"""A LangGraph SDK client (langgraph-sdk, pinned in tests/requirements.txt) reading a
thread back as DeerFlow's frontend does: two runs on one thread (the second streamed in
the `tasks`, `checkpoints` and `debug` modes), then the thread's messages and its
backward pages, a run's messages, events and workspace changes, the token usage, and
another user asking for each of them. Prints one JSON report on stdout for
suite::thread_reads to check.

Usage: thread_reads_client.py BASE_URL ALICE_TOKEN BOB_TOKEN
"""

import asyncio
import json
import sys

import httpx
from langgraph_sdk import get_client


def human(text):
    return {"messages": [{"role": "human", "content": text}]}


async def stream(parts):
    try:
        return [[p.event, p.data, p.id] async for p in parts]
    except httpx.HTTPStatusError as e:
        return [e.response.status_code, e.response.text]


async def main(base, alice_token, bob_token):
    alice = get_client(url=base, headers={"Authorization": f"Bearer {alice_token}"})
    report = {}
    tid = (await alice.threads.create())["thread_id"]
    report["thread"] = tid

    first = await alice.runs.create(tid, "lead_agent", input=human("Write a note, please."))
    await alice.runs.join(tid, first["run_id"])
    report["first_run"] = first["run_id"]
    report["stream"] = await stream(
        alice.runs.stream(
            tid,
            "lead_agent",
            input=human("Now a second note."),
            stream_mode=["tasks", "checkpoints", "debug"],
        )
    )
    report["second_run"] = report["stream"][0][1]["run_id"]
    report["statuses"] = [(await alice.runs.get(tid, r))["status"] for r in (first["run_id"], report["second_run"])]

    def reader(token):
        return httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"})

    async def get(http, path, **params):
        response = await http.get(path, params=params)
        return [response.status_code, response.json()]

    first_run = report["first_run"]
    routes = {
        "messages": (f"/threads/{tid}/messages", {}),
        "messages_after": (f"/threads/{tid}/messages", {"after_seq": 2, "limit": 2}),
        "page_1": (f"/threads/{tid}/messages/page", {"limit": 3}),
        "page_forward": (f"/threads/{tid}/messages/page", {"after_seq": 1}),
        "page_bad_limit": (f"/threads/{tid}/messages/page", {"limit": 0}),
        "run_messages": (f"/threads/{tid}/runs/{first_run}/messages", {}),
        "run_messages_2": (f"/threads/{tid}/runs/{first_run}/messages", {"limit": 2}),
        "run_events": (f"/threads/{tid}/runs/{first_run}/events", {}),
        "run_events_tools": (f"/threads/{tid}/runs/{first_run}/events", {"event_types": "tool_finished"}),
        "workspace": (f"/threads/{tid}/runs/{first_run}/workspace-changes", {}),
        "token_usage": (f"/threads/{tid}/token-usage", {}),
        "state": (f"/threads/{tid}/state", {}),
    }
    async with reader(alice_token) as http:
        for key, (path, params) in routes.items():
            report[key] = await get(http, path, **params)
        pages = [report["page_1"]]
        while pages[-1][1].get("has_more"):
            before = pages[-1][1]["next_before_seq"]
            pages.append(await get(http, f"/threads/{tid}/messages/page", limit=3, before_seq=before))
        report["pages"] = pages
    async with reader(bob_token) as http:
        report["bob"] = {
            key: await get(http, path, **params)
            for key, (path, params) in routes.items()
            if key not in ("page_forward", "page_bad_limit")
        }
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))

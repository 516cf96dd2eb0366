"""A LangGraph SDK client (langgraph-sdk, pinned in tests/requirements.txt) driving Antler's
LangGraph-compatible API as DeerFlow's frontend would: threads, runs streamed in every
stream mode, state, history, search, another user's view, refusals, a busy thread, a
stream joined again after an event id, cancel and delete. Prints one JSON report on stdout
for suite::thread_langgraph to check.

Usage: langgraph_client.py BASE_URL ALICE_TOKEN BOB_TOKEN
       langgraph_client.py BASE_URL ALICE_TOKEN start           (one thread, one run streamed)
       langgraph_client.py BASE_URL ALICE_TOKEN join TID RID ID (the run joined after frame ID)
"""

import asyncio
import json
import sys

import httpx
from langgraph_sdk import get_client

ACCEPTED = ["values", "messages-tuple", "updates", "custom", "debug", "tasks", "checkpoints"]


def refusal(e):
    """(status, detail) of an SDK error."""
    response = getattr(e, "response", None)
    if response is None:
        return [0, repr(e)]
    try:
        detail = response.json().get("detail")
    except Exception:
        detail = response.text
    return [response.status_code, detail]


async def refused(call):
    try:
        result = await call
    except httpx.HTTPStatusError as e:
        return refusal(e)
    return [200, result]


async def stream(parts):
    try:
        return [[p.event, p.data, p.id] async for p in parts]
    except httpx.HTTPStatusError as e:
        return refusal(e)


def human(text):
    return {"messages": [{"role": "human", "content": text}]}


async def main(base, alice_token, bob_token):
    alice = get_client(url=base, headers={"Authorization": f"Bearer {alice_token}"})
    bob = get_client(url=base, headers={"Authorization": f"Bearer {bob_token}"})
    report = {}
    created = await alice.threads.create(metadata={"suite": "langgraph", "owner_id": "mallory"})
    tid = created["thread_id"]
    report["created"] = created
    report["created_again"] = await alice.threads.create(thread_id=tid, metadata={"suite": "other"})
    seen = []
    report["stream_all"] = await stream(
        alice.runs.stream(
            tid,
            "lead_agent",
            input=human("What is Antler?"),
            stream_mode=ACCEPTED,
            on_run_created=lambda meta: seen.append(dict(meta)),
        )
    )
    # The SDK reads the run from `Content-Location`.
    report["run_created"] = seen
    report["stream_values"] = await stream(
        alice.runs.stream(tid, "lead_agent", input=human("And a second question?"), stream_mode="values")
    )
    report["stream_messages"] = await stream(
        alice.runs.stream(tid, "lead_agent", input=human("A third one."), stream_mode="messages-tuple")
    )
    report["stream_updates"] = await stream(
        alice.runs.stream(tid, "lead_agent", input=human("A fourth one."), stream_mode=["updates"])
    )
    report["state"] = await alice.threads.get_state(tid)
    report["thread"] = await alice.threads.get(tid)
    report["history"] = await alice.threads.get_history(tid, limit=10)
    report["search"] = await alice.threads.search(metadata={"suite": "langgraph"})
    report["search_none"] = await alice.threads.search(metadata={"suite": "nope"})
    report["runs"] = await alice.runs.list(tid)
    report["run"] = await alice.runs.get(tid, report["runs"][0]["run_id"])

    # Another user: the thread does not exist for it.
    report["bob_get"] = await refused(bob.threads.get(tid))
    report["bob_state"] = await refused(bob.threads.get_state(tid))
    report["bob_stream"] = await stream(bob.runs.stream(tid, "lead_agent", input=human("mine now")))
    report["bob_delete"] = await refused(bob.threads.delete(tid))
    report["bob_search"] = await bob.threads.search(metadata={"suite": "langgraph"})
    report["bob_run"] = await refused(bob.runs.get(tid, report["runs"][0]["run_id"]))

    # What DeerFlow refuses, with its texts.
    report["bad_mode"] = await stream(alice.runs.stream(tid, "lead_agent", input=human("x"), stream_mode="messages"))
    report["bad_option"] = await stream(
        alice.runs.stream(tid, "lead_agent", input=human("x"), webhook="http://127.0.0.1:9/hook")
    )
    report["bad_thread"] = await refused(alice.threads.create(thread_id="not a thread id!"))
    report["bad_model"] = await stream(
        alice.runs.stream(tid, "lead_agent", input=human("x"), context={"model_name": "nope"})
    )

    # A busy thread: a slow run in the background, a second run, a delete.
    slow = await alice.runs.create(tid, "lead_agent", input=human("Take your time."), context={"model_name": "slow"})
    report["slow"] = slow
    report["busy_run"] = await refused(alice.runs.create(tid, "lead_agent", input=human("Me too.")))
    report["busy_delete"] = await refused(alice.threads.delete(tid))
    report["joined"] = await alice.runs.join(tid, slow["run_id"])

    # The first run's stream joined again after the id of its first frame (a reconnect
    # right after it), and whole.
    first_run = report["stream_all"][0][1]["run_id"]
    first_values = report["stream_all"][0][2]
    report["replay_from"] = first_values
    report["replay_after"] = await stream(
        alice.runs.join_stream(tid, first_run, stream_mode=ACCEPTED, last_event_id=first_values)
    )
    report["replay"] = await stream(alice.runs.join_stream(tid, first_run, stream_mode=ACCEPTED))

    # Waited for, then cancelled.
    report["waited"] = await alice.runs.wait(tid, "lead_agent", input=human("Wait for this one."))
    slow = await alice.runs.create(tid, "lead_agent", input=human("Never mind."), context={"model_name": "slow"})
    await asyncio.sleep(0.5)
    await alice.runs.cancel(tid, slow["run_id"], wait=True)
    report["cancelled"] = await alice.runs.get(tid, slow["run_id"])
    report["cancel_again"] = await refused(alice.runs.cancel(tid, slow["run_id"]))

    # Another run while one is live: `rollback` takes the live run back, `interrupt`
    # keeps what it wrote.
    gone = await alice.runs.create(tid, "lead_agent", input=human("Take this back."), context={"model_name": "slow"})
    await asyncio.sleep(0.5)
    over = await alice.runs.create(
        tid, "lead_agent", input=human("Instead, this."), multitask_strategy="rollback"
    )
    report["rollback_values"] = await alice.runs.join(tid, over["run_id"])
    report["rolled_back"] = await alice.runs.get(tid, gone["run_id"])
    kept = await alice.runs.create(tid, "lead_agent", input=human("Keep this."), context={"model_name": "slow"})
    await asyncio.sleep(0.5)
    over = await alice.runs.create(
        tid, "lead_agent", input=human("And now this."), multitask_strategy="interrupt"
    )
    report["interrupt_values"] = await alice.runs.join(tid, over["run_id"])
    report["interrupted"] = await alice.runs.get(tid, kept["run_id"])

    # Antler's own run route continues the same thread: the LangGraph routes see its run.
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {alice_token}"}) as http:
        own = await http.post("/runs", json={"task": "Through Antler's own route.", "thread": tid})
        report["own_run"] = [own.status_code, own.json()]
    report["own_joined"] = await alice.runs.join(tid, report["own_run"][1]["run_id"])

    # A client that goes away mid-stream (on_disconnect: cancel, the default) takes its
    # run with it.
    parts = alice.runs.stream(tid, "lead_agent", input=human("I will hang up."), context={"model_name": "stall"})
    async for part in parts:
        left = part.data["run_id"]
        break
    await parts.aclose()
    for _ in range(300):
        status = (await alice.runs.get(tid, left))["status"]
        if status != "running":
            break
        await asyncio.sleep(0.1)
    report["hung_up"] = status

    report["delete"] = await refused(alice.threads.delete(tid))

    # A clarification (spec A.7 step 5): the run stops at the question; the answer, a
    # hidden human message with `human_input_response`, drives the same run on.
    asked = (await alice.threads.create())["thread_id"]
    report["clarify_first"] = await stream(
        alice.runs.stream(asked, "lead_agent", input=human("Write a report"), context={"model_name": "clarify"})
    )
    report["clarify_thread"] = await alice.threads.get(asked)
    answer = {
        "messages": [
            {
                "role": "human",
                "content": "2025",
                "additional_kwargs": {
                    "hide_from_ui": True,
                    "human_input_response": {
                        "version": 1,
                        "kind": "human_input_response",
                        "source": "ask_clarification",
                        "request_id": "q1",
                        "response_kind": "option",
                        "value": "2025",
                        "option_id": "2025",
                    },
                },
            }
        ]
    }
    report["clarify_answer"] = await stream(
        alice.runs.stream(asked, "lead_agent", input=answer, context={"model_name": "clarify"})
    )
    report["after_delete"] = await refused(alice.threads.get(tid))
    print(json.dumps(report))


async def start(base, token):
    client = get_client(url=base, headers={"Authorization": f"Bearer {token}"})
    tid = (await client.threads.create())["thread_id"]
    frames = await stream(
        client.runs.stream(tid, "lead_agent", input=human("Before the restart."), stream_mode=ACCEPTED)
    )
    print(json.dumps({"thread": tid, "run": frames[0][1]["run_id"], "stream": frames}))


async def join(base, token, tid, rid, last_id):
    client = get_client(url=base, headers={"Authorization": f"Bearer {token}"})
    frames = await stream(client.runs.join_stream(tid, rid, stream_mode=ACCEPTED, last_event_id=last_id))
    print(json.dumps({"stream": frames}))


if __name__ == "__main__":
    if sys.argv[3] == "start":
        asyncio.run(start(sys.argv[1], sys.argv[2]))
    elif sys.argv[3] == "join":
        asyncio.run(join(sys.argv[1], sys.argv[2], *sys.argv[4:7]))
    else:
        asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))

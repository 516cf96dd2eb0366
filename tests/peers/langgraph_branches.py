"""A LangGraph SDK client (langgraph-sdk, pinned in tests/requirements.txt) driving the
routes DeerFlow's frontend adds on top of LangGraph's: branches, regenerate and edit
(prepare, then a run from the returned checkpoint) and thread goals, as alice, with bob
trying each on alice's thread. Prints one JSON report on stdout for
suite::thread_branches or suite::thread_goal to check.

Usage: langgraph_branches.py BASE_URL ALICE_TOKEN BOB_TOKEN branches|goal
"""

import asyncio
import json
import sys

import httpx
from langgraph_sdk import get_client


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


def human(text):
    return {"messages": [{"role": "human", "content": text}]}


async def ask(client, tid, text):
    return await client.runs.wait(tid, "lead_agent", input=human(text))


async def branches(alice, bob):
    report = {}
    tid = (await alice.threads.create(metadata={"suite": "branches"}))["thread_id"]
    report["thread_id"] = tid
    await ask(alice, tid, "First question?")
    await ask(alice, tid, "Second question?")
    before = (await alice.threads.get_state(tid))["values"]["messages"]
    report["before"] = before
    first_ai = next(m["id"] for m in before if m["type"] == "ai")
    latest_ai = before[-1]["id"]

    # A branch at the first turn, and a run on it.
    branch = await alice.http.post(
        f"/threads/{tid}/branches", json={"message_id": first_ai, "message_ids": [first_ai]}
    )
    report["branch"] = branch
    report["branch_thread"] = await alice.threads.get(branch["thread_id"])
    report["branch_state"] = await alice.threads.get_state(branch["thread_id"])
    await ask(alice, branch["thread_id"], "Branch question?")
    report["branch_after"] = await alice.threads.get_state(branch["thread_id"])
    report["parent_after_branch"] = await alice.threads.get_state(tid)
    report["branch_latest"] = await alice.http.post(
        f"/threads/{tid}/branches", json={"message_id": latest_ai, "title": "Kept apart"}
    )
    report["branch_latest_thread"] = await alice.threads.get(report["branch_latest"]["thread_id"])
    report["branch_human"] = await refused(
        alice.http.post(f"/threads/{tid}/branches", json={"message_id": before[0]["id"]})
    )

    # Regenerate the latest answer: prepare, then a run from the returned checkpoint.
    prepared = await alice.http.post(f"/threads/{tid}/runs/regenerate/prepare", json={"message_id": latest_ai})
    report["prepared"] = prepared
    # A replay that does not start (a model not configured) leaves the thread as it was.
    report["bad_model_replay"] = await refused(
        alice.runs.wait(
            tid, "lead_agent", input=prepared["input"], checkpoint=prepared["checkpoint"],
            context={"model_name": "nope"},
        )
    )
    report["after_bad_model"] = (await alice.threads.get_state(tid))["values"]["messages"]
    report["regenerated"] = await alice.runs.wait(
        tid,
        "lead_agent",
        input=prepared["input"],
        checkpoint=prepared["checkpoint"],
        metadata=prepared["metadata"],
    )
    report["after_regenerate"] = (await alice.threads.get_state(tid))["values"]["messages"]
    report["prepare_old"] = await refused(
        alice.http.post(f"/threads/{tid}/runs/regenerate/prepare", json={"message_id": first_ai})
    )
    report["prepare_missing"] = await refused(
        alice.http.post(f"/threads/{tid}/runs/regenerate/prepare", json={"message_id": "ai-99"})
    )

    # Edit the latest question: prepare, then a run from the checkpoint id alone.
    latest_human = [m for m in report["after_regenerate"] if m["type"] == "human"][-1]
    report["edit_unchanged"] = await refused(
        alice.http.post(
            f"/threads/{tid}/runs/edit-regenerate/prepare",
            json={"human_message_id": latest_human["id"], "replacement_text": " Second question? "},
        )
    )
    edit = await alice.http.post(
        f"/threads/{tid}/runs/edit-regenerate/prepare",
        json={"human_message_id": latest_human["id"], "replacement_text": "Edited question?"},
    )
    report["edit"] = edit
    await alice.runs.wait(
        tid, "lead_agent", input=edit["input"], checkpoint_id=edit["checkpoint"]["checkpoint_id"]
    )
    report["after_edit"] = (await alice.threads.get_state(tid))["values"]["messages"]

    # A clarification answered, then its answer regenerated: the replay starts after the
    # question, before the answer.
    asked = (await alice.threads.create())["thread_id"]
    await ask(alice, asked, "Plan a trip.")
    answer = {"messages": [{"role": "human", "content": "Paris", "additional_kwargs": {
        "hide_from_ui": True,
        "human_input_response": {"version": 1, "kind": "human_input_response", "source": "ask_clarification",
                                 "request_id": "q1", "response_kind": "text", "value": "Paris"}}}]}
    await alice.runs.wait(asked, "lead_agent", input=answer)
    answered = (await alice.threads.get_state(asked))["values"]["messages"]
    report["answered"] = answered
    replay = await alice.http.post(
        f"/threads/{asked}/runs/regenerate/prepare", json={"message_id": answered[-1]["id"]}
    )
    report["answer_prepared"] = replay
    await alice.runs.wait(asked, "lead_agent", input=replay["input"], checkpoint=replay["checkpoint"])
    report["answer_regenerated"] = (await alice.threads.get_state(asked))["values"]["messages"]

    # Bob: alice's thread is not there for him.
    report["bob_branch"] = await refused(
        bob.http.post(f"/threads/{tid}/branches", json={"message_id": first_ai})
    )
    report["bob_prepare"] = await refused(
        bob.http.post(f"/threads/{tid}/runs/regenerate/prepare", json={"message_id": latest_ai})
    )
    report["bob_edit"] = await refused(
        bob.http.post(
            f"/threads/{tid}/runs/edit-regenerate/prepare",
            json={"human_message_id": latest_human["id"], "replacement_text": "Mine"},
        )
    )
    # Bob's own thread cannot start from alice's checkpoint.
    own = (await bob.threads.create())["thread_id"]
    report["bob_checkpoint"] = await refused(
        bob.runs.wait(own, "lead_agent", input=human("x"), checkpoint=prepared["checkpoint"])
    )
    return report


async def goal(alice, bob):
    report = {}
    met = (await alice.threads.create(metadata={"suite": "goal"}))["thread_id"]
    capped = (await alice.threads.create(metadata={"suite": "goal"}))["thread_id"]
    report["met_thread"], report["capped_thread"] = met, capped
    report["empty"] = await alice.http.get(f"/threads/{met}/goal")
    report["set"] = await alice.http.put(f"/threads/{met}/goal", json={"objective": "  Finish   A "})
    report["got"] = await alice.http.get(f"/threads/{met}/goal")
    await ask(alice, met, "Do part A.")
    report["met_state"] = (await alice.threads.get_state(met))["values"]
    report["met_goal"] = await alice.http.get(f"/threads/{met}/goal")

    await alice.http.put(f"/threads/{capped}/goal", json={"objective": "Finish B", "max_continuations": 1})
    await ask(alice, capped, "Do part B.")
    report["capped_state"] = (await alice.threads.get_state(capped))["values"]
    report["capped_goal"] = await alice.http.get(f"/threads/{capped}/goal")
    question = [m for m in report["capped_state"]["messages"] if m["type"] == "human"][0]
    report["edit_with_goal"] = await refused(
        alice.http.post(
            f"/threads/{capped}/runs/edit-regenerate/prepare",
            json={"human_message_id": question["id"], "replacement_text": "Other"},
        )
    )
    # During a run (the model takes its time over this one) a goal is neither set nor cleared.
    slow = await alice.runs.create(capped, "lead_agent", input=human("Take your time."))
    report["busy_put"] = await refused(alice.http.put(f"/threads/{capped}/goal", json={"objective": "x"}))
    report["busy_delete"] = await refused(alice.http.delete(f"/threads/{capped}/goal"))
    await alice.runs.join(capped, slow["run_id"])
    cleared = []
    await alice.http.delete(f"/threads/{capped}/goal", on_response=lambda r: cleared.append(r.json()))
    report["cleared"] = cleared[0]
    report["cleared_goal"] = await alice.http.get(f"/threads/{capped}/goal")

    put = lambda body: refused(alice.http.put(f"/threads/{met}/goal", json=body))
    report["too_long"] = await put({"objective": "x" * 4001})
    report["blank"] = await put({"objective": "   "})
    report["too_many"] = await put({"objective": "go", "max_continuations": 9})

    report["bob_get"] = await refused(bob.http.get(f"/threads/{met}/goal"))
    report["bob_put"] = await refused(bob.http.put(f"/threads/{met}/goal", json={"objective": "mine"}))
    report["bob_delete"] = await refused(bob.http.delete(f"/threads/{met}/goal"))
    return report


async def main(base, alice_token, bob_token, mode):
    alice = get_client(url=base, headers={"Authorization": f"Bearer {alice_token}"})
    bob = get_client(url=base, headers={"Authorization": f"Bearer {bob_token}"})
    report = await (branches if mode == "branches" else goal)(alice, bob)
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))

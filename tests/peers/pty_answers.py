#!/usr/bin/env python3
"""Runs a command on a pseudo-terminal and answers its prompts, as a person at a terminal
would: argv[1] is a JSON list of [prompt substring, answer line] pairs answered in order,
the rest is the command. Prints everything the command wrote, then exits with its status.
Gives up (killing the command) after 120 s."""
import json
import os
import pty
import select
import signal
import sys
import time

answers = json.loads(sys.argv[1])
command = sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(command[0], command)
seen = b""
next_answer = 0
deadline = time.time() + 120
while True:
    if time.time() > deadline:
        os.kill(pid, signal.SIGKILL)
        sys.stdout.write(seen.decode(errors="replace") + "\n[pty_answers: timed out]\n")
        sys.exit(124)
    ready, _, _ = select.select([fd], [], [], 0.2)
    if ready:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    if next_answer < len(answers):
        prompt, line = answers[next_answer]
        if prompt.encode() in seen:
            os.write(fd, (line + "\n").encode())
            # Only what comes after this answer is matched for the next prompt.
            sys.stdout.write(seen.decode(errors="replace"))
            seen = b""
            next_answer += 1
_, status = os.waitpid(pid, 0)
sys.stdout.write(seen.decode(errors="replace"))
sys.stdout.flush()
sys.exit(os.waitstatus_to_exitcode(status))

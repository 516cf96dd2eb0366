"""Drives headless Chromium over the DevTools protocol for the inspector tests.

Usage: cdp_driver.py CHROMIUM. Starts Chromium headless (a fresh profile, no sandbox: the
tests run as root), then reads one JSON command per line on stdin and answers one JSON
line on stdout: {"ok": true, "value": ...} or {"ok": false, "error": "..."}.

Commands: goto {url}; eval {expr} (the value of a JS expression, awaited);
wait {expr, timeout_s} (until the expression is truthy); viewport {width, height, mobile};
screenshot {path}; downloads {dir}; errors (JS exceptions and console.error calls so far;
network failures the page handles itself are not errors); quit.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import base64

from websockets.sync.client import connect


class Session:
    def __init__(self, url):
        self.ws = connect(url, max_size=64 * 1024 * 1024, open_timeout=20)
        self.next_id = 0
        self.errors = []
        self.lock = threading.Lock()

    def call(self, method, params=None, timeout=30):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"{method} did not answer in {timeout} s")
            message = json.loads(self.ws.recv(timeout=left))
            if message.get("id") == my_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.event(message)

    def event(self, message):
        method = message.get("method")
        params = message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            self.errors.append(f"exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.errors.append(f"console.error: {args}")
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            if entry.get("level") == "error" and entry.get("source") not in ("network",):
                self.errors.append(f"log: {entry.get('text')}")

    def pump(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            try:
                self.event(json.loads(self.ws.recv(timeout=max(0.01, end - time.time()))))
            except TimeoutError:
                return

    def evaluate(self, expr):
        result = self.call("Runtime.evaluate", {
            "expression": expr, "awaitPromise": True, "returnByValue": True, "userGesture": True,
        })
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"].get("exception", {}).get("description")
                               or result["exceptionDetails"].get("text"))
        return result.get("result", {}).get("value")


def main():
    chromium = sys.argv[1]
    profile = tempfile.mkdtemp(prefix="antler-cdp-")
    proc = subprocess.Popen(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--no-default-browser-check", "--disable-extensions", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        browser_url = None
        deadline = time.time() + 60
        while time.time() < deadline and browser_url is None:
            line = proc.stderr.readline()
            if not line:
                if proc.poll() is not None:
                    break
                continue
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                browser_url = found.group(1)
        if browser_url is None:
            print(json.dumps({"ok": False, "error": "chromium did not start"}), flush=True)
            return
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        browser = Session(browser_url)
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        page_url = browser_url.split("/devtools/")[0] + f"/devtools/page/{target}"
        page = Session(page_url)
        for domain in ("Page", "Runtime", "Log"):
            page.call(f"{domain}.enable")
        print(json.dumps({"ok": True, "value": "ready"}), flush=True)
        for line in sys.stdin:
            if not line.strip():
                continue
            command = json.loads(line)
            op = command.get("op")
            try:
                if op == "goto":
                    page.call("Page.navigate", {"url": command["url"]})
                    page.pump(0.5)
                    value = True
                elif op == "eval":
                    value = page.evaluate(command["expr"])
                elif op == "wait":
                    end = time.time() + float(command.get("timeout_s", 20))
                    value = None
                    while time.time() < end:
                        value = page.evaluate(command["expr"])
                        if value:
                            break
                        page.pump(0.2)
                    if not value:
                        raise TimeoutError(f"never true: {command['expr']}")
                elif op == "viewport":
                    page.call("Emulation.setDeviceMetricsOverride", {
                        "width": command["width"], "height": command["height"],
                        "deviceScaleFactor": 1, "mobile": bool(command.get("mobile"))})
                    value = True
                elif op == "screenshot":
                    data = page.call("Page.captureScreenshot", {"format": "png"})["data"]
                    with open(command["path"], "wb") as out:
                        out.write(base64.b64decode(data))
                    value = command["path"]
                elif op == "downloads":
                    browser.call("Browser.setDownloadBehavior", {
                        "behavior": "allow", "downloadPath": command["dir"]})
                    value = True
                elif op == "errors":
                    page.pump(0.3)
                    value = page.errors
                elif op == "quit":
                    print(json.dumps({"ok": True, "value": "bye"}), flush=True)
                    return
                else:
                    raise ValueError(f"unknown op {op}")
                print(json.dumps({"ok": True, "value": value}), flush=True)
            except Exception as error:  # the test sees every failure as a reply
                print(json.dumps({"ok": False, "error": f"{type(error).__name__}: {error}"}), flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()

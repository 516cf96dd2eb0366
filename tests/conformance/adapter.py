#!/usr/bin/env python3
"""The MCP conformance suite's client adapter: what a user of Antler would do with the
scenario's server, and nothing more. `conformance client --command "adapter.py"` runs it
with the scenario server's URL as its argument, the scenario's name in
MCP_CONFORMANCE_SCENARIO and what the scenario hands over (client credentials, a signing
key) in MCP_CONFORMANCE_CONTEXT.

It writes an extensions_config.json with one HTTP server `conf` at that URL (with an
`oauth` block holding the credentials handed over, if any, and `elicitation:
accept_defaults`), points $BROWSER at a headless browser (curl following the
authorization redirects to Antler's loopback callback), starts a local cluster with
`antler up`, lists the server's tools with `antler mcp tools conf`, calls each with
arguments made from its input schema with `antler mcp call`, and stops the cluster with
`antler down`. ANTLER_BIN_DIR names the directory of the `antler` binary."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

url = sys.argv[1]
scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
antler = os.path.join(os.environ.get("ANTLER_BIN_DIR", ""), "antler")
# The client metadata document URL the suite's authorization servers know.
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def log(*parts):
    print("adapter:", *parts, file=sys.stderr, flush=True)


def oauth_block():
    """The `oauth` block a user would write from what the scenario hands over."""
    block = {}
    for key in ("client_id", "client_secret"):
        if context.get(key):
            block[key] = context[key]
    if context.get("private_key_pem"):
        block["private_key_pem"] = context["private_key_pem"]
        block["signing_algorithm"] = context.get("signing_algorithm", "ES256")
    if context.get("idp_id_token"):
        # Enterprise-managed authorization: the user's ID token from their identity
        # provider, and this client's registration there.
        block["grant_type"] = "jwt_bearer"
        block["subject_token"] = context["idp_id_token"]
        block["idp_token_endpoint"] = context["idp_token_endpoint"]
        block["idp_client_id"] = context["idp_client_id"]
    elif scenario.startswith("auth/client-credentials"):
        block["grant_type"] = "client_credentials"
    elif "client_id" not in block:
        # Where this client's metadata document is published (SEP-991): used as the
        # client id by an authorization server that supports them, else dynamic
        # registration.
        block["client_metadata_url"] = CLIENT_METADATA_URL
    return block


def example_args(schema):
    """Arguments that satisfy an input schema's required properties."""
    args = {}
    props = (schema or {}).get("properties") or {}
    for name in (schema or {}).get("required") or []:
        kind = (props.get(name) or {}).get("type")
        args[name] = {"number": 1, "integer": 1, "boolean": True, "array": [], "object": {}}.get(
            kind, "x"
        )
    return args


def main():
    work = tempfile.mkdtemp(prefix="antler-conformance-")
    runtime = os.path.join(work, "run")
    config = os.path.join(work, "extensions_config.json")
    server = {"type": "http", "url": url, "elicitation": "accept_defaults"}
    if scenario.startswith("auth/"):
        server["oauth"] = oauth_block()
    with open(config, "w") as f:
        json.dump({"mcpServers": {"conf": server}}, f)
    browser = os.path.join(work, "browser.sh")
    with open(browser, "w") as f:
        f.write('#!/bin/sh\nexec curl -sS -L --max-time 20 -o /dev/null "$1"\n')
    os.chmod(browser, 0o755)
    env = dict(os.environ, BROWSER=browser, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
    common = ["--runtime-dir", runtime, "--extensions", config]
    up = subprocess.Popen(
        [antler, "up", "--workers", "1", *common],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=sys.stderr,
        start_new_session=True,
    )
    code = 1
    try:
        # `antler status` only reads a running cluster (the `mcp` commands would start
        # one of their own while this one is not up yet).
        for _ in range(300):
            up_now = subprocess.run(
                [antler, "status", "--runtime-dir", runtime], env=env, capture_output=True
            )
            if up_now.returncode == 0:
                break
            time.sleep(0.1)
        for _ in range(300):
            st = subprocess.run(
                [antler, "mcp", "status", *common], env=env, capture_output=True, text=True
            )
            if st.returncode == 0 and ("ready" in st.stdout or "failed" in st.stdout):
                break
            time.sleep(0.1)
        log(st.stdout.strip())
        tools = subprocess.run(
            [antler, "mcp", "tools", "conf", "--json", *common],
            env=env,
            capture_output=True,
            text=True,
        )
        log("tools:", tools.stdout.strip(), tools.stderr.strip())
        listed = json.loads(tools.stdout or "[]") if tools.returncode == 0 else []
        code = tools.returncode
        for tool in listed:
            name = tool.get("original_name") or tool.get("name")
            args = example_args(tool.get("input_schema") or tool.get("inputSchema"))
            call = subprocess.run(
                [antler, "mcp", "call", "conf", name, "--args", json.dumps(args), *common],
                env=env,
                capture_output=True,
                text=True,
            )
            log("call", name, "->", call.returncode, call.stdout.strip(), call.stderr.strip())
    finally:
        subprocess.run([antler, "down", *common], env=env, capture_output=True)
        # The hosts' logs go to the scenario's stderr.txt, for whoever reads a failure.
        for name in ("mcp-host.log",):
            path = os.path.join(runtime, "logs", name)
            if os.path.exists(path):
                with open(path) as f:
                    log(name + ":\n" + "".join(f.readlines()[-40:]))
        try:
            up.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

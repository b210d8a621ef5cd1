#!/usr/bin/env python3
"""Drives the demo page (web/index.html) in headless Chromium over the Chrome DevTools
Protocol and prints what it saw as one JSON object on stdout. The Rust test
crates/oxinfer-cli/tests/web_browser.rs runs it and compares the results with the native CLI;
`--bench` measures speed instead (docs/wasm.md).

It serves ROOT (which must hold web/ with web/pkg built by scripts/build-web.sh, and the model
files) with Python's http.server on 127.0.0.1, opens
http://127.0.0.1:PORT/web/index.html?kernels=scalar (the reference kernels, to compare with
`OXINFER_KERNELS=scalar` natively token for token), and:

1. loads BAD (a broken GGUF) through the page's URL box: the status line must show an error,
   the page and its worker must keep working;
2. loads MODEL through the URL box, sends the first PROMPT in the chat box with temperature 0
   and N tokens, and records the streamed text and the generated ids;
3. through the page's client (window.oxinferApp.ox): greedy ids for the other prompts, each a
   new conversation, greedy ids after TOKENS, the last row of logits after TOKENS, and the
   error for an id outside the vocabulary;
4. in a second and a third client (workers) on the default int8 kernels of each build, the
   SIMD128 module (web/pkg) and the relaxed-SIMD one (web/pkg-relaxed): the same ids after
   TOKENS and logits.

The page itself runs the module its worker picks (`auto`: relaxed SIMD where Chromium has it);
`--bench --build simd128|relaxed` times one of them.

Needs: chromium (Debian package; $CHROMIUM overrides), websocket-client (scripts/setup-web.sh
installs it in ~/.cache/oxinfer/webvenv).
"""
import argparse
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import websocket  # websocket-client


DEFAULT_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
        ".gguf": "application/octet-stream",
    }

    def log_message(self, *args):
        pass


def serve(root):
    handler = functools.partial(QuietHandler, directory=root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_chromium(profile, extra=()):
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        sys.exit("drive_browser: no chromium on PATH (scripts/setup-web.sh installs it)")
    args = [
        exe,
        "--headless",
        "--no-sandbox",  # runs as root in CI
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        # A headless page counts as hidden: keep Chromium from lowering its renderer's priority
        # and throttling its timers (speed numbers would then measure the machine's load).
        "--disable-renderer-backgrounding",
        "--disable-background-timer-throttling",
        "--disable-backgrounding-occluded-windows",
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        *extra,
        "about:blank",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    port_file = os.path.join(profile, "DevToolsActivePort")
    for _ in range(600):
        if os.path.exists(port_file):
            lines = open(port_file).read().split("\n")
            if lines[0].strip():
                return proc, int(lines[0])
        if proc.poll() is not None:
            sys.exit(f"drive_browser: chromium exited: {proc.stderr.read().decode(errors='replace')[-2000:]}")
        time.sleep(0.1)
    proc.kill()
    sys.exit("drive_browser: chromium did not open its debugging port in 60 s")


class Page:
    """One page target over CDP: evaluate expressions, keep console lines and exceptions."""

    def __init__(self, port):
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=900, suppress_origin=True)
        self.next_id = 0
        self.console = []
        self.call("Runtime.enable")
        self.call("Page.enable")

    def call(self, method, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            self.note(msg)

    def note(self, msg):
        m = msg.get("method")
        if m == "Runtime.consoleAPICalled":
            p = msg["params"]
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
            self.console.append(f"console.{p['type']}: {text}")
        elif m == "Runtime.exceptionThrown":
            d = msg["params"]["exceptionDetails"]
            self.console.append(f"exception: {d.get('exception', {}).get('description', d.get('text'))}")

    def eval(self, expr):
        """The value of `expr` (awaited when a promise), as JSON; raises on a JS exception."""
        r = self.call("Runtime.evaluate", expression=expr, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise RuntimeError(d.get("exception", {}).get("description") or d.get("text"))
        return r["result"].get("value")

    def wait_for(self, expr, timeout=600):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.eval(expr):
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {expr}")


def load_via_ui(page, url):
    page.eval(f"""(() => {{
        document.getElementById('status').dataset.state = '';
        document.getElementById('url').value = {json.dumps(url)};
        document.getElementById('load-url').click();
    }})()""")
    page.wait_for("['ready', 'error'].includes(document.getElementById('status').dataset.state)")
    return page.eval("({state: document.getElementById('status').dataset.state,"
                     " text: document.getElementById('status').textContent})")


def chat_via_ui(page, prompt, n):
    return page.eval(f"""(async () => {{
        document.getElementById('temperature').value = '0';
        document.getElementById('max-tokens').value = '{n}';
        document.getElementById('prompt').value = {json.dumps(prompt)};
        document.getElementById('send').click();
        const turn = await window.oxinferApp.lastTurn;
        return {{...turn, shown: document.querySelector('.msg.assistant:last-child').textContent,
                 stats: document.getElementById('stats').textContent}};
    }})()""")


def client_checks(page, client, a, prompts):
    """Through `client` (a JS expression naming an Oxinfer with the model loaded): greedy ids
    of each prompt (a new conversation each) and after TOKENS, and the logits after TOKENS."""
    ids = [int(x) for x in a.tokens.split(",")]
    greedy = f"{{maxTokens: {a.n}, temperature: 0}}"
    # Each from an empty cache, as `oxinfer run` starts.
    return {
        "prompts": [
            page.eval(f"""{client}.reset().then(() => {client}.generate(
                [{{role: 'user', content: {json.dumps(p)}}}], {greedy}))""")
            for p in prompts
        ],
        "tokens": page.eval(f"{client}.reset().then(() => {client}.generate({json.dumps(ids)}, {greedy}))"),
        "logits": page.eval(f"{client}.lastLogits({json.dumps(ids)}).then(Array.from)"),
    }


def run_checks(page, a):
    """The page runs on the scalar kernels (?kernels=scalar) of the module its worker picks; a
    client per build in the same page on that build's default int8 kernels."""
    prompts = a.prompt or DEFAULT_PROMPTS
    out = {"bad": load_via_ui(page, a.bad), "load": load_via_ui(page, a.model)}
    if out["load"]["state"] != "ready":
        return out
    out["load"]["info"] = page.eval("window.oxinferApp.info")
    out["chat"] = chat_via_ui(page, prompts[0], a.n)
    if a.screenshot:
        import base64

        shot = page.call("Page.captureScreenshot", format="png")
        open(a.screenshot, "wb").write(base64.b64decode(shot["data"]))
    out["scalar"] = client_checks(page, "window.oxinferApp.ox", a, prompts[1:])
    out["badIds"] = page.eval(
        "window.oxinferApp.ox.lastLogits([1, 1e9]).then(() => 'no error', e => e.message)")
    for build in ("simd128", "relaxed"):
        page.eval(f"""(async () => {{
            window.simd = new window.oxinferApp.Oxinfer(undefined, {{build: '{build}'}});
            window.simdInfo = await window.simd.load({{url: {json.dumps(a.model)}}});
        }})()""")
        out[build] = client_checks(page, "window.simd", a, [])
        out[build]["info"] = page.eval("window.simdInfo")
        page.eval("window.simd.terminate()")
    return out


def run_bench(page, a):
    """Prefill and decode speed of `a.n` greedy tokens after the chat prompt, `a.reps` times."""
    load = load_via_ui(page, a.model)
    load["info"] = page.eval("window.oxinferApp.info")
    prompt = (a.prompt or ["Write a long story about a dragon who learns to fly."])[0]
    runs = []
    for _ in range(a.reps):
        s = page.eval(f"""window.oxinferApp.ox.reset().then(() => window.oxinferApp.ox.generate(
            [{{role: 'user', content: {json.dumps(prompt)}}}],
            {{maxTokens: {a.n}, temperature: 0}}))""")
        runs.append({k: s[k] for k in ("prefillTokens", "prefillMs", "decodeTokens", "decodeMs", "reason")})
    return {"load": load, "runs": runs}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="folder served: holds web/ and the models")
    ap.add_argument("--model", required=True, help="the model's URL path under ROOT")
    ap.add_argument("--bad", help="a broken GGUF's URL path under ROOT")
    ap.add_argument("--prompt", action="append", help="chat prompt (repeatable; the first goes "
                    "through the chat box); default: three fixed prompts")
    ap.add_argument("--tokens", default="1,504,3575,282,4649,314,7042,30")
    ap.add_argument("-n", type=int, default=16)
    ap.add_argument("--screenshot", help="write a PNG of the page after the chat turn here")
    ap.add_argument("--bench", action="store_true", help="measure speed instead of checking")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--js-flags", help="V8 flags for Chromium (e.g. --no-liftoff)")
    ap.add_argument("--build", choices=["auto", "simd128", "relaxed"], default="auto",
                    help="with --bench: the module the page runs (default: the worker's pick)")
    a = ap.parse_args()

    server = serve(a.root)
    profile = tempfile.mkdtemp(prefix="oxinfer-chromium-")
    proc, port = start_chromium(profile, [f"--js-flags={a.js_flags}"] if a.js_flags else [])
    page = None
    try:
        page = Page(port)
        page.call("Emulation.setDeviceMetricsOverride", width=900, height=640, deviceScaleFactor=1, mobile=False)
        query = f"?build={a.build}" if a.bench else "?kernels=scalar"
        page.call("Page.navigate", url=f"http://127.0.0.1:{server.server_port}/web/index.html{query}")
        page.wait_for("document.readyState === 'complete' && window.oxinferApp !== undefined", 60)
        result = run_bench(page, a) if a.bench else run_checks(page, a)
        result["userAgent"] = page.eval("navigator.userAgent")
        result["console"] = page.console
        json.dump(result, sys.stdout)
    except Exception as e:  # report what the page said along with the failure
        console = page.console if page else []
        sys.exit(f"drive_browser: {e}\n" + "\n".join(console[-30:]))
    finally:
        proc.kill()
        proc.wait()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()

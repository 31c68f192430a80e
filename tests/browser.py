"""A real headless Chromium (Debian's), driven over the DevTools protocol, for testing pages we write.

`load(path)` opens a file, waits for the load event and returns what a user would care about: the
console errors and uncaught exceptions, every request made (a self-contained page makes none
beyond data: and file:), each image's natural size, and a full-page screenshot; `scripts` are
JavaScript expressions evaluated in the loaded page (each returns JSON text), e.g. to read back
the tick labels of the inline SVG plots with where the browser laid them out.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--remote-allow-origins=*"]
LISTENING = re.compile(r"DevTools listening on (ws://\S+)")
IMAGES = ("JSON.stringify([...document.images].map(i => ({alt: i.alt, complete: i.complete, "
          "width: i.naturalWidth, height: i.naturalHeight})))")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Loaded:
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)
    title: str = ""
    text: str = ""
    values: dict = field(default_factory=dict)  # name -> the parsed JSON each script returned


async def _session(ws_url: str, path: Path, screenshot: Path, scripts: dict[str, str], width: int) -> Loaded:
    import aiohttp

    loaded = Loaded()
    ids = iter(range(1, 10_000))
    async with aiohttp.ClientSession() as http:
        port = ws_url.split("://", 1)[1].split("/", 1)[0]
        async with http.put(f"http://{port}/json/new?about:blank") as response:
            target = json.loads(await response.text())
        async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            pending: dict[int, asyncio.Future] = {}
            load_fired = asyncio.get_running_loop().create_future()

            async def reader():
                async for message in ws:
                    data = json.loads(message.data)
                    if "id" in data and data["id"] in pending:
                        pending.pop(data["id"]).set_result(data)
                    method, params = data.get("method"), data.get("params", {})
                    if method == "Runtime.exceptionThrown":
                        loaded.errors.append(params["exceptionDetails"].get("text", "exception"))
                    elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                        loaded.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
                    elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                        loaded.errors.append(params["entry"]["text"])
                    elif method == "Network.requestWillBeSent":
                        loaded.requests.append(params["request"]["url"][:200])
                    elif method == "Page.loadEventFired" and not load_fired.done():
                        load_fired.set_result(True)

            async def call(method: str, **params):
                number = next(ids)
                pending[number] = asyncio.get_running_loop().create_future()
                await ws.send_str(json.dumps({"id": number, "method": method, "params": params}))
                reply = await asyncio.wait_for(pending[number], 30)
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

            task = asyncio.create_task(reader())
            for domain in ("Page", "Runtime", "Log", "Network"):
                await call(f"{domain}.enable")
            await call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False)
            await call("Page.navigate", url=path.resolve().as_uri())
            await asyncio.wait_for(load_fired, 60)
            result = await call("Runtime.evaluate", expression=IMAGES, returnByValue=True)
            loaded.images = json.loads(result["result"]["value"])
            loaded.title = (await call("Runtime.evaluate", expression="document.title", returnByValue=True))["result"]["value"]
            loaded.text = (await call("Runtime.evaluate", expression="document.body.innerText",
                                      returnByValue=True))["result"]["value"]
            for name, expression in scripts.items():
                result = await call("Runtime.evaluate", expression=expression, returnByValue=True)
                if "exceptionDetails" in result:
                    raise RuntimeError(f"{name}: {result['exceptionDetails']}")
                loaded.values[name] = json.loads(result["result"]["value"])
            metrics = await call("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            shot = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                              clip={"x": 0, "y": 0, "width": width, "height": min(size["height"], 16000), "scale": 1})
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            task.cancel()
    return loaded


def load(path: Path, screenshot: Path, timeout: float = 90, scripts: dict[str, str] | None = None,
         width: int = 1300) -> Loaded:
    """Open `path` in a fresh headless Chromium (its own profile directory), return what it saw."""
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    process = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        ws_url = None
        while ws_url is None:
            assert time.monotonic() < deadline, "chromium did not start its DevTools endpoint"
            line = process.stderr.readline()
            assert line or process.poll() is None, "chromium exited at start"
            found = LISTENING.search(line)
            ws_url = found.group(1) if found else None
        return asyncio.run(asyncio.wait_for(_session(ws_url, path, screenshot, scripts or {}, width), timeout))
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(profile, ignore_errors=True)

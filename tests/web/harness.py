"""harness.py: what the dashboard's browser tests share.

- Server: a `canopy serve` in its own temp dir and process group, with users
  alice (token "ta") and bob (token "tb") and inline commands allowed; it
  serves the dashboard from runtime/web on disk (CANOPY_WEB_DIR) unless
  --embedded is given. Always stopped and reaped, even on failure.
- Relay: a TCP relay in front of the server whose connections can be cut.
- Model double: tests/fake_llm/fake_llm.py with a script of replies, the
  server's provider `default` (model_replies=..., model_price=...).
- Browser: headless Chromium through selenium (1280x800), waits on DOM
  conditions (WebDriverWait, never a fixed sleep), screenshots to --out.
- main(test): runs one test function with a fresh Harness and exits 0 on
  success, 1 with a clear message (plus a screenshot, the browser console
  and the server log tail) on failure.
"""

import argparse
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

REPO = Path(__file__).resolve().parents[2]
WEB_DIR = REPO / "runtime" / "web"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
TOKENS = {"alice": "ta", "bob": "tb"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def signal_group(p, sig):
    """Sends sig to process p's group (it runs in a session of its own)."""
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def wait_for(cond, timeout=10.0, message="condition", interval=0.05):
    """Polls cond() (any callable) until it returns a truthy value; returns it."""
    return WebDriverWait(None, timeout, poll_frequency=interval).until(lambda _: cond(), message=f"timed out after {timeout}s waiting for {message}")


class Server:
    """One `canopy serve` process on a fixed port (so it can be restarted on it)."""

    def __init__(self, binary, root, port=None, web_dir=WEB_DIR, cluster_port=None):
        self.binary = str(binary)
        self.root = Path(root)
        self.home = self.root / "home"
        self.port = port or free_port()
        self.cluster_port = cluster_port
        self.web_dir = web_dir
        self.proc = None
        self.log_path = self.root / "serve.log"
        self.starts = 0
        self.extra_config = {}  # more keys of the node config (e.g. providers)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def write_config(self):
        cfg = {
            "listen": f"127.0.0.1:{self.port}",
            "users": {u: {"token": t} for u, t in TOKENS.items()},
            "allow_inline_commands": True,
        }
        if self.cluster_port:
            cfg["cluster"] = {"listen": f"127.0.0.1:{self.cluster_port}", "secret": "web-test-secret",
                              "heartbeat": "500ms", "timeout": "3s"}
        cfg.update(self.extra_config)
        path = self.root / "config.json"
        path.write_text(json.dumps(cfg))
        return path

    def start(self, *extra):
        assert self.proc is None, "server already running"
        self.root.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.web_dir:
            env["CANOPY_WEB_DIR"] = str(self.web_dir)
        self.starts += 1
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--home", str(self.home), "serve", "--config", str(self.write_config()), *extra],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env, cwd=self.root,
            start_new_session=True)
        log.close()
        deadline = time.monotonic() + 20
        line = b""
        while time.monotonic() < deadline and b"\n" not in line:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
        if b"listening on" not in line:
            self.stop()
            raise RuntimeError(f"canopy serve did not start (stdout {line!r}); log:\n{self.log_tail()}")
        return self

    def stop(self):
        """SIGTERM to the process group, SIGKILL after 20 s; always reaps."""
        p, self.proc = self.proc, None
        if p is None:
            return
        signal_group(p, signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            signal_group(p, signal.SIGKILL)
            p.wait()
        if p.stdout:
            p.stdout.close()

    def log_tail(self, n=40):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # ---- HTTP API ---------------------------------------------------
    def call(self, method, path, body=None, token="ta", accept="application/json"):
        """Returns (status, parsed JSON or None)."""
        data = None if body is None else json.dumps(body).encode()
        if method == "POST" and data is None:
            data = b"{}"
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        req.add_header("Accept", accept)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                raw = res.read()
                return res.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, None

    def ok(self, method, path, body=None, token="ta"):
        status, data = self.call(method, path, body, token)
        assert 200 <= status < 300, f"{method} {path} answered {status}: {data}"
        return data

    def register(self, graph, token="ta"):
        return self.ok("POST", "/v1/graphs", graph, token)

    def start_execution(self, graph_id, inputs=None, token="ta"):
        return self.ok("POST", f"/v1/graphs/{graph_id}/executions", {"inputs": inputs or {}}, token)

    def execution(self, exec_id, token="ta"):
        return self.ok("GET", f"/v1/executions/{exec_id}", token=token)

    def events(self, exec_id, token="ta"):
        return self.ok("GET", f"/v1/executions/{exec_id}/events", token=token)["items"]

    def wait_status(self, exec_id, statuses, timeout=30, token="ta"):
        statuses = {statuses} if isinstance(statuses, str) else set(statuses)
        return wait_for(lambda: (lambda x: x if x["status"] in statuses else None)(self.execution(exec_id, token)),
                        timeout, f"execution {exec_id} to be {sorted(statuses)}")


class ModelDouble:
    """tests/fake_llm/fake_llm.py playing `replies` on a free 127.0.0.1 port,
    in its own process group; stop() kills and reaps it."""

    def __init__(self, root, replies):
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        script = root / "replies.json"
        script.write_text(json.dumps({"replies": replies}))
        port_file = root / "port"
        self.log_path = root / "requests.jsonl"
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", str(REPO / "tests" / "fake_llm" / "fake_llm.py"), "--script", str(script),
             "--log", str(self.log_path), "--port-file", str(port_file)],
            stdin=subprocess.DEVNULL, start_new_session=True)
        wait_for(lambda: port_file.exists() and port_file.read_text().strip(), 20, "the model double to listen")
        self.base_url = f"http://127.0.0.1:{port_file.read_text().strip()}/v1"

    def stop(self):
        p, self.proc = self.proc, None
        if p is not None:
            signal_group(p, signal.SIGKILL)
            p.wait()


class Relay:
    """A TCP relay 127.0.0.1:port -> target port; cut() closes every connection."""

    def __init__(self, target_port, port=None, rewrite=None):
        self.target_port = target_port
        self.rewrite = rewrite  # bytes -> bytes, applied to what the client sends
        self.port = port or free_port()
        self.conns = []
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b, f in ((client, upstream, self.rewrite), (upstream, client, None)):
                threading.Thread(target=self._pump, args=(a, b, f), daemon=True).start()

    @staticmethod
    def _pump(src, dst, rewrite=None):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(rewrite(data) if rewrite else data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        """Drops every open connection at once (like a network failure)."""
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        return len(conns) // 2

    def close(self):
        self.closed = True
        self.listener.close()
        self.cut()


class Browser:
    """Headless Chromium with waits and screenshots."""

    def __init__(self, base_url, out_dir, width=1280, height=800):
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}",
                  "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # chromedriver is started here and reached at 127.0.0.1: selenium's
        # own Service dials "localhost", which a minimal root (no /etc/hosts)
        # cannot resolve.
        port = free_port()
        self.driver_proc = subprocess.Popen([CHROMEDRIVER, f"--port={port}"], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self.driver_proc.poll() is not None or time.monotonic() > deadline:
                    self.stop_driver()
                    raise RuntimeError(f"{CHROMEDRIVER} did not start listening on 127.0.0.1:{port}")
                time.sleep(0.05)  # the poll interval of a wait for its port
        try:
            self.driver = webdriver.Remote(command_executor=f"http://127.0.0.1:{port}", options=opts)
        except Exception:
            self.stop_driver()
            raise
        self.driver.set_window_size(width, height)
        self.base_url = base_url
        self.out = Path(out_dir)
        self.console = []

    def open(self, route=""):
        self.driver.get(f"{self.base_url}/ui/{route}")

    def go(self, route):
        """Changes the hash route without reloading the page."""
        self.driver.execute_script("location.hash = arguments[0]", route)

    def wait(self, cond, timeout=10, message="condition"):
        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.05,
                                 ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: cond(), message=message)
        except TimeoutException:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}") from None

    def q(self, testid, within=None, **data):
        """The elements with data-testid=testid (and data-KEY=VALUE for each keyword)."""
        sel = f'[data-testid="{testid}"]' + "".join(f'[data-{k.replace("_", "-")}="{v}"]' for k, v in data.items())
        return (within or self.driver).find_elements(By.CSS_SELECTOR, sel)

    def one(self, testid, timeout=10, **data):
        return self.wait(lambda: (lambda els: els[0] if els and els[0].is_displayed() else None)(self.q(testid, **data)),
                         timeout, f"[data-testid={testid}] {data}")

    def text(self, testid, **data):
        """The rendered text of the first such element ("" when none), read in
        one script call, so a redraw cannot make it stale halfway."""
        sel = f'[data-testid="{testid}"]' + "".join(f'[data-{k.replace("_", "-")}="{v}"]' for k, v in data.items())
        return self.js("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", sel)

    def read(self, fn, tries=20):
        """fn() on the live page, again when the page redrew an element that fn
        was reading (StaleElementReferenceException): fn must find its elements
        itself. A read, not a wait: no condition is awaited."""
        for i in range(tries):
            try:
                return fn()
            except StaleElementReferenceException:
                if i == tries - 1:
                    raise

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def click(self, testid, timeout=10, **data):
        el = self.wait(lambda: (lambda els: els[0] if els and els[0].is_displayed() and els[0].is_enabled() else None)(self.q(testid, **data)),
                       timeout, f"clickable [data-testid={testid}] {data}")
        try:
            el.click()
        except StaleElementReferenceException:  # redrawn meanwhile: once more
            return self.click(testid, timeout, **data)
        return el

    def confirm(self):
        """Accepts the confirmation dialog."""
        self.one("confirm-dialog")
        self.click("confirm-yes")
        self.wait(lambda: not self.js("const d = document.querySelector('[data-testid=confirm-dialog]'); return d && d.open"),
                  5, "the dialog to close")

    def login(self, token):
        self.open("")
        self.one("token-input").send_keys(token)
        self.click("token-submit")

    def shot(self, name):
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def full_shot(self, name):
        """A screenshot of the whole page height (the window grows for it)."""
        size = self.driver.get_window_size()
        height = self.js("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
        self.driver.set_window_size(size["width"], min(max(height, size["height"]), 4000))
        try:
            return self.shot(name)
        finally:
            self.driver.set_window_size(size["width"], size["height"])

    def logs(self):
        try:
            self.console += self.driver.get_log("browser")
        except WebDriverException:
            pass
        return self.console

    def errors(self):
        """JavaScript errors (network failures, 401s and 404s that the page handles are not)."""
        benign = ("Failed to load resource", "net::ERR_", "favicon")
        return [e["message"] for e in self.logs() if e.get("level") == "SEVERE" and not any(b in e["message"] for b in benign)]

    def stop_driver(self):
        """Stops and reaps chromedriver's process group."""
        if self.driver_proc.poll() is None:
            try:
                os.killpg(self.driver_proc.pid, signal.SIGTERM)
                self.driver_proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.driver_proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.driver_proc.wait()

    def quit(self):
        try:
            self.logs()
            self.driver.quit()
        except Exception:
            pass
        self.stop_driver()


class Harness:
    """A server, a browser and a temp dir for one test; `with Harness(args) as hx:`."""

    def __init__(self, args, name, cluster=False, relay=False, model_replies=None, model_price=None):
        self.args = args
        self.name = name
        self.tmp = Path(tempfile.mkdtemp(prefix=f"canopy-web-{name}-"))
        self.out = Path(args.out) if args.out else self.tmp / "out"
        self.out.mkdir(parents=True, exist_ok=True)
        web_dir = None if args.embedded else WEB_DIR
        self.server = Server(args.canopy, self.tmp / "server", web_dir=web_dir, cluster_port=free_port() if cluster else None)
        self.relay_wanted = relay
        self.relay = None
        self.browser = None
        self.workers = []
        self.model_replies = model_replies  # a model double's script: the node gets provider `default`
        self.model_price = model_price      # {"input": N, "output": N} per million tokens, or None
        self.model = None

    def __enter__(self):
        # `with` calls __exit__ only after __enter__ returned: clean up here
        # when the browser (or the relay) cannot start, so no server is left.
        try:
            if self.model_replies is not None:
                self.model = ModelDouble(self.tmp / "model", self.model_replies)
                provider = {"base_url": self.model.base_url}
                if self.model_price:
                    provider["price"] = self.model_price
                self.server.extra_config["providers"] = {"default": provider}
            self.server.start()
            if self.relay_wanted:
                self.relay = Relay(self.server.port)
            self.browser = Browser(self.relay.url if self.relay else self.server.url, self.out)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def start_worker(self, name, slots=2):
        tools = self.tmp / f"{name}-tools.json"
        tools.write_text(json.dumps({"tools": {}, "cluster": {"secret": "web-test-secret", "heartbeat": "500ms", "timeout": "3s"}}))
        log = open(self.tmp / f"{name}.log", "ab")
        p = subprocess.Popen([str(self.args.canopy), "--home", str(self.tmp / f"{name}-home"), "worker", "--join",
                              f"127.0.0.1:{self.server.cluster_port}", "--slots", str(slots), "--name", name, "--tools", str(tools)],
                             stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.workers.append(p)
        return p

    def stop_worker(self, p, sig=signal.SIGKILL):
        signal_group(p, sig)
        p.wait(timeout=20)

    def __exit__(self, kind, value, tb):
        if kind is not None and self.browser:
            try:
                print(f"screenshot of the failure: {self.browser.shot('FAIL-' + self.name)}", file=sys.stderr)
            except Exception:
                pass
        if self.browser:
            self.browser.quit()
            if kind is not None and self.browser.console:
                print("browser console:\n  " + "\n  ".join(e["message"] for e in self.browser.console[-30:]), file=sys.stderr)
        for p in self.workers:
            if p.poll() is None:
                self.stop_worker(p)
        if self.relay:
            self.relay.close()
        if kind is not None:
            print("server log (tail):\n" + self.server.log_tail(), file=sys.stderr)
        self.server.stop()
        if self.model:
            self.model.stop()
        if not self.args.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False


def parse_args(argv=None, extra=None):
    p = argparse.ArgumentParser(description="a browser test of the canopy dashboard")
    p.add_argument("--canopy", required=True, help="the canopy binary")
    p.add_argument("--out", default="", help="folder for screenshots (default: a temp folder)")
    p.add_argument("--embedded", action="store_true", help="serve the files compiled into the binary, not runtime/web")
    p.add_argument("--keep", action="store_true", help="keep the temp folder (server home and logs)")
    if extra:
        extra(p)
    return p.parse_args(argv)


def main(test, name, **harness_opts):
    """Runs test(hx) and exits 0, or 1 with the reason."""
    args = parse_args()
    t0 = time.monotonic()
    try:
        with Harness(args, name, **harness_opts) as hx:
            test(hx)
            bad = hx.browser.errors()
            assert not bad, f"the browser console has errors: {bad}"
    except AssertionError as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).name.startswith("test_")]
        where = f" [{Path(frames[-1].filename).name}:{frames[-1].lineno}: {frames[-1].line}]" if frames else ""
        print(f"FAIL {name} ({time.monotonic() - t0:.1f}s): {e}{where}", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # a crash of the test itself
        traceback.print_exc()
        print(f"FAIL {name} ({time.monotonic() - t0:.1f}s): {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"PASS {name} ({time.monotonic() - t0:.1f}s)")
    sys.exit(0)

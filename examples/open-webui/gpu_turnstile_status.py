"""
title: GPU turnstile status
description: Says under a chat why its answer waits for the GPU (an image job, a hold, another model) and for about how long, from the turnstile's live status. It never waits itself.
version: 1.0.0
license: Apache-2.0
"""

# An Open WebUI filter function for caddy-gpu-turnstile. Its inlet returns
# at once: waiting here would queue the request outside the turnstile.
# It shows a status under the answer and follows the turnstile's event
# stream (Server-Sent Events from a gpu_turnstile_status route) in a task
# of its own per message, updating the status while that message's
# request is listed among the waiters; the answer's first chunk (stream)
# or its end (outlet) closes the status with done: true.
#
# Open WebUI keeps one instance of this class for all requests, so what
# is per request lives in self._follows, keyed by the message id.
#
# Standard library only, and the pydantic that Open WebUI provides.

import asyncio
import base64
import json
import re
import ssl
import time
import urllib.parse
from datetime import datetime, timezone
from typing import Awaitable, Callable, Optional

from pydantic import BaseModel, Field

Emitter = Callable[[dict], Awaitable[None]]

# What a waiter waits for (its "waiting_for", else the turnstile's state),
# as the status says it.
REASONS = {
    "job": "an image job",
    "image": "an image job",
    "hold": "a hold",
    "llm": "chats on another model",
    "vram": "room in video memory",
    "vram_reading": "a reading of video memory",
    "presence": "a program that uses the GPU",
    "unload": "the LLM engine to unload its models",
    "free": "the image engine to free its memory",
    "wake": "the engine to wake",
}


class Filter:
    class Valves(BaseModel):
        status_url: str = Field(
            default="http://127.0.0.1:11434/healthz",
            description="The turnstile's status route (a gpu_turnstile_status handler) on the site Open WebUI sends its chats to.",
        )
        clock_skew_seconds: float = Field(
            default=2.0,
            description="How much earlier than this filter's clock the turnstile's may run: a waiter that began to wait up to this long before the request was made may be its.",
        )
        follow_seconds: float = Field(
            default=3600.0,
            description="The longest one message's status is followed.",
        )

    def __init__(self):
        self.valves = self.Valves()
        self._follows: dict[str, "_Follow"] = {}

    async def inlet(
        self,
        body: dict,
        __event_emitter__: Optional[Emitter] = None,
        __metadata__: Optional[dict] = None,
        __model__: Optional[dict] = None,
    ) -> dict:
        key = _message_id(__metadata__, body)
        if __event_emitter__ is None or key is None or (__metadata__ or {}).get("task"):
            return body  # an API call or a background task: nobody to show a status to
        self._prune()
        self._end(key)
        f = _Follow(self, key, _model_of(body, __model__), time.time(), __event_emitter__)
        self._follows[key] = f
        await f.emit("checking the GPU", False)
        f.task = asyncio.create_task(f.run())
        return body

    async def stream(self, event: dict, __metadata__: Optional[dict] = None) -> dict:
        key = _message_id(__metadata__, None)
        if key in self._follows:
            await self._finish(key)
        return event

    async def outlet(self, body: dict, __metadata__: Optional[dict] = None) -> dict:
        key = _message_id(__metadata__, body)
        if key in self._follows:
            await self._finish(key)
        return body

    async def _finish(self, key: str) -> None:
        """Ends a message's follow and closes its status."""
        f = self._end(key)
        if f is not None:
            await f.close()

    def _prune(self) -> None:
        """Forgets the messages whose answer never came (an error before
        its first chunk, a client gone) once they are past follow_seconds."""
        old = time.time() - self.valves.follow_seconds
        for key in [k for k, f in self._follows.items() if f.made < old]:
            self._end(key)

    def _end(self, key: str) -> Optional["_Follow"]:
        f = self._follows.pop(key, None)
        if f is not None and f.task is not None:
            f.task.cancel()
        return f

    def _assign(self, waiters: list) -> None:
        """Matches the messages not yet matched, oldest request first, to the
        LLM waiters that no other message has: the oldest waiter of the
        message's model that began to wait after its request was made (less
        the clock skew). Requests reach the turnstile in the order they were
        made, so the n-th unmatched message of a model gets the n-th new
        waiter of that model."""
        listed = {_waiter_key(w) for w in waiters}
        taken = {f.waiter for f in self._follows.values() if f.waiter in listed}
        skew = self.valves.clock_skew_seconds
        for f in sorted(self._follows.values(), key=lambda f: f.made):
            if f.waiter is not None:
                continue
            for w in waiters:
                k = _waiter_key(w)
                if k in taken or w.get("kind") != "llm" or not _same_model(w.get("model"), f.model):
                    continue
                since = _parse_time(w.get("since"))
                if since is not None and since >= f.made - skew:
                    f.waiter = k
                    f.since = since
                    taken.add(k)
                    break


class _Follow:
    """One message's status: its request, its waiter once matched, and the
    task that follows the event stream for it."""

    def __init__(self, filt: Filter, key: str, model: str, made: float, emit: Emitter):
        self.filt = filt
        self.key = key
        self.model = model
        self.made = made
        self._emit = emit
        self.task: Optional[asyncio.Task] = None
        self.waiter: Optional[tuple] = None  # its waiter's (since, model, path)
        self.since: Optional[float] = None
        self.gone = False  # its waiter was listed and is no more
        self.reason = ""
        self.last = None

    async def emit(self, description: str, done: bool, hidden: bool = False) -> None:
        if (description, done, hidden) == self.last:
            return
        self.last = (description, done, hidden)
        await self._emit({"type": "status", "data": {"description": description, "done": done, "hidden": hidden}})

    async def close(self) -> None:
        """Closes the status: what the wait was, or hidden if there was none."""
        if self.since is None:
            await self.emit("the GPU was free", True, hidden=True)
            return
        waited = max(0, round(time.time() - self.since))
        await self.emit(f"waited {waited} s for the GPU" + (f": {self.reason}" if self.reason else ""), True)

    async def run(self) -> None:
        try:
            await asyncio.wait_for(self._follow(), self.filt.valves.follow_seconds)
        except asyncio.CancelledError:
            raise
        except Exception:
            pass  # the status stays as it was; the chat goes on

    async def _follow(self) -> None:
        async for status in _events(self.filt.valves.status_url):
            if self.key not in self.filt._follows:
                return
            self.filt._assign(status.get("waiters") or [])
            text = self.describe(status)
            if text is not None:
                await self.emit(text, False)
            if self.gone:
                waited = max(0, round(time.time() - self.since))
                await self.emit(f"got the GPU after {waited} s", False)
                return

    def describe(self, status: dict) -> Optional[str]:
        """The status line while this message's request waits, or None."""
        waiters = status.get("waiters") or []
        mine = next((w for w in waiters if _waiter_key(w) == self.waiter), None)
        if mine is None:
            if self.waiter is not None:
                self.gone = True
            return None
        self.reason = _reason(mine, status)
        parts = ["waiting for the GPU: " + self.reason]
        parts.append(_ordinal(_position(mine, waiters)) + " in line")
        eta = _about(mine.get("expected_start"))
        if eta:
            parts.append(eta)
        return ", ".join(parts)


def _message_id(metadata: Optional[dict], body: Optional[dict]) -> Optional[str]:
    """The message a call is about: the metadata's message_id, or the id of
    the completed message's body in outlet."""
    m = metadata or {}
    key = m.get("message_id") or (body or {}).get("id")
    return str(key) if key else None


def _model_of(body: dict, model: Optional[dict]) -> str:
    """The model the engine is asked for: a workspace model's base model."""
    info = (model or {}).get("info") or {}
    return info.get("base_model_id") or body.get("model") or ""


def _same_model(a: Optional[str], b: str) -> bool:
    def norm(m: Optional[str]) -> str:
        m = (m or "").strip()
        return m[: -len(":latest")] if m.endswith(":latest") else m

    return bool(b) and norm(a) == norm(b)


def _waiter_key(w: dict) -> tuple:
    return (w.get("since"), w.get("model"), w.get("path"))


def _reason(w: dict, status: dict) -> str:
    what = w.get("waiting_for") or status.get("state") or ""
    reason = REASONS.get(what, "its turn")
    if what == "hold":
        owners = [h.get("owner") for h in status.get("holds") or [] if h.get("owner")]
        if owners:
            reason += " (" + owners[0] + ")"
    return reason


def _position(w: dict, waiters: list) -> int:
    """The waiter's place in line: the turnstile's "position" where it gives
    one, else its place among the waiters listed, oldest first."""
    p = w.get("position")
    if isinstance(p, int) and p > 0:
        return p
    return waiters.index(w) + 1


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _about(expected_start: Optional[str]) -> str:
    t = _parse_time(expected_start)
    if t is None:
        return ""
    left = max(1, round(t - time.time()))
    return f"about {left} s" if left < 90 else f"about {round(left / 60)} min"


_FRACTION = re.compile(r"\.(\d+)")


def _parse_time(s: Optional[str]) -> Optional[float]:
    """An RFC 3339 time (Go writes up to nine fractional digits) as a Unix
    time; None if there is none."""
    if not s:
        return None
    s = _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), s.replace("Z", "+00:00"), count=1)
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.timestamp()


async def _events(url: str):
    """Yields each status of the turnstile's event stream at url. It speaks
    HTTP/1.0, so that the stream is the body as it comes (no chunked
    encoding), over asyncio's streams: nothing blocks the event loop."""
    u = urllib.parse.urlsplit(url)
    tls = u.scheme == "https"
    port = u.port or (443 if tls else 80)
    reader, writer = await asyncio.open_connection(
        u.hostname, port, ssl=ssl.create_default_context() if tls else None, server_hostname=u.hostname if tls else None
    )
    try:
        path = (u.path or "/") + ("?" + u.query if u.query else "")
        host = u.netloc.rpartition("@")[2]
        auth = ""
        if u.username is not None:  # basic_auth in front of the status route
            token = base64.b64encode(
                f"{urllib.parse.unquote(u.username)}:{urllib.parse.unquote(u.password or '')}".encode()
            ).decode()
            auth = f"Authorization: Basic {token}\r\n"
        writer.write(
            f"GET {path} HTTP/1.0\r\nHost: {host}\r\n{auth}Accept: text/event-stream\r\nCache-Control: no-store\r\n\r\n".encode()
        )
        await writer.drain()
        head = (await reader.readline()).decode("latin-1").split()
        if len(head) < 2 or head[1] != "200":
            raise ConnectionError(f"status stream at {url}: {' '.join(head[1:]) or 'no answer'}")
        while (await reader.readline()).strip():
            pass  # the headers
        event, data = "", []
        while True:
            line = await reader.readline()
            if not line:
                return
            line = line.decode("utf-8").rstrip("\r\n")
            if line == "":
                if event == "status" and data:
                    yield json.loads("\n".join(data))
                event, data = "", []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
    finally:
        writer.close()

"""Tests of the Open WebUI filter (gpu_turnstile_status.py).

The unit tests run anywhere: python3 -m unittest test_gpu_turnstile_status.
The tests against a turnstile run from the Go test TestOpenWebUIFilter
(openwebui_test.go at the module's root), which starts Caddy with the
engine fakes and passes, in the environment:

  TURNSTILE_LLM_URL      the site of the LLM engine (Ollama's API)
  TURNSTILE_STATUS_URL   its gpu_turnstile_status route
  TURNSTILE_CONTROL_URL  POST /job starts an image job and answers once it
                         runs; POST /end ends it

Standard library only; pydantic's BaseModel is stubbed where pydantic is
not installed (Open WebUI provides it).
"""

import asyncio
import json
import os
import sys
import types
import unittest
import urllib.request

try:
    import pydantic  # noqa: F401
except ImportError:
    stub = types.ModuleType("pydantic")

    class BaseModel:
        def __init__(self, **values):
            for name in getattr(type(self), "__annotations__", {}):
                setattr(self, name, values.get(name, getattr(type(self), name)))

    def Field(default=None, **_):
        return default

    stub.BaseModel, stub.Field = BaseModel, Field
    sys.modules["pydantic"] = stub

import gpu_turnstile_status as gts  # noqa: E402

LLM_URL = os.environ.get("TURNSTILE_LLM_URL")
STATUS_URL = os.environ.get("TURNSTILE_STATUS_URL")
CONTROL_URL = os.environ.get("TURNSTILE_CONTROL_URL")

# How long a test waits for what it expects: the turnstile sends each
# change within 100 ms, on a loaded machine a few seconds.
PATIENCE = 30


class Recorder:
    """An __event_emitter__ that records the statuses and wakes who waits."""

    def __init__(self):
        self.statuses = []
        self._changed = asyncio.Condition()

    async def __call__(self, event):
        assert event["type"] == "status", event
        async with self._changed:
            self.statuses.append(event["data"])
            self._changed.notify_all()

    async def wait_for(self, what, cond):
        async def until():
            async with self._changed:
                await self._changed.wait_for(lambda: any(cond(s) for s in self.statuses))

        try:
            await asyncio.wait_for(until(), PATIENCE)
        except asyncio.TimeoutError:
            raise AssertionError(f"no status {what}; saw {self.descriptions()}") from None

    def descriptions(self):
        return [s["description"] for s in self.statuses]


def chat_body(model):
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}


class Chat:
    """A streaming /api/chat through the turnstile, as Open WebUI sends it
    after the inlet, read in a thread."""

    def __init__(self, body):
        req = urllib.request.Request(
            LLM_URL + "/api/chat", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        self._task = asyncio.create_task(asyncio.to_thread(urllib.request.urlopen, req, timeout=PATIENCE * 4))

    async def first_chunk(self):
        self.resp = await self._task
        line = await asyncio.to_thread(self.resp.readline)
        return json.loads(line)

    async def rest(self):
        try:
            return (await asyncio.to_thread(self.resp.read)).decode()
        finally:
            self.resp.close()


async def control(what):
    def post():
        with urllib.request.urlopen(urllib.request.Request(CONTROL_URL + "/" + what, data=b""), timeout=PATIENCE) as r:
            return r.status

    status = await asyncio.to_thread(post)
    if status != 200:
        raise AssertionError(f"control {what}: {status}")


def waiting(position):
    return lambda s: s["description"].startswith(f"waiting for the GPU: an image job, {position} in line") and not s["done"]


@unittest.skipUnless(LLM_URL and STATUS_URL and CONTROL_URL, "run by the Go test TestOpenWebUIFilter")
class TestAgainstTheTurnstile(unittest.IsolatedAsyncioTestCase):
    async def test_status_while_an_image_job_runs(self):
        await control("job")
        f = gts.Filter()
        f.valves.status_url = STATUS_URL
        rec = Recorder()
        meta = {"message_id": "m1", "chat_id": "c1"}
        body = chat_body("llama3.2")
        self.assertIs(await f.inlet(body, __event_emitter__=rec, __metadata__=meta), body)
        self.assertEqual(rec.statuses, [{"description": "checking the GPU", "done": False, "hidden": False}])
        chat = Chat(body)
        await rec.wait_for("saying it waits for the image job", waiting("1st"))
        await control("end")
        chunk = await chat.first_chunk()
        self.assertIs(await f.stream(chunk, __metadata__=meta), chunk)
        last = rec.statuses[-1]
        self.assertTrue(last["done"], rec.statuses)
        self.assertRegex(last["description"], r"^waited \d+ s for the GPU: an image job$")
        self.assertIn('"done":true', await chat.rest())
        n = len(rec.statuses)
        await f.outlet({"id": "m1", "messages": []}, __metadata__=meta)
        self.assertEqual(len(rec.statuses), n, "a second done status")
        self.assertEqual(f._follows, {})
        for s in rec.statuses:
            self.assertNotIn("2nd", s["description"])

    async def test_two_requests_keep_their_own_statuses(self):
        await control("job")
        f = gts.Filter()
        f.valves.status_url = STATUS_URL
        recs, chats, metas = [], [], []
        for i in range(2):
            rec, meta, body = Recorder(), {"message_id": f"m{i}"}, chat_body("llama3.2")
            await f.inlet(body, __event_emitter__=rec, __metadata__=meta)
            chats.append(Chat(body))
            # LLM requests are let in together: both are next in line.
            await rec.wait_for(f"of request {i} in line", waiting("1st"))
            recs.append(rec)
            metas.append(meta)
        await control("end")
        first = await chats[0].first_chunk()
        await f.stream(first, __metadata__=metas[0])
        self.assertTrue(recs[0].statuses[-1]["done"], recs[0].descriptions())
        self.assertFalse(recs[1].statuses[-1]["done"], "the other request's status ended with this one's answer")
        await chats[0].rest()
        await f.stream(await chats[1].first_chunk(), __metadata__=metas[1])
        await chats[1].rest()
        for rec in recs:
            self.assertTrue(rec.statuses[-1]["done"], rec.descriptions())
            self.assertEqual(sum(1 for s in rec.statuses if s["done"]), 1, rec.descriptions())

    async def test_hidden_when_the_gpu_is_free(self):
        f = gts.Filter()
        f.valves.status_url = STATUS_URL
        rec, meta, body = Recorder(), {"message_id": "free"}, chat_body("llama3.2")
        await f.inlet(body, __event_emitter__=rec, __metadata__=meta)
        chat = Chat(body)
        await f.stream(await chat.first_chunk(), __metadata__=meta)
        await chat.rest()
        self.assertEqual(rec.statuses[-1], {"description": "the GPU was free", "done": True, "hidden": True})


class TestUnits(unittest.IsolatedAsyncioTestCase):
    def test_ordinal(self):
        self.assertEqual([gts._ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)],
                         ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"])

    def test_parse_time(self):
        self.assertEqual(gts._parse_time("2026-01-02T03:04:05.123456789Z"), 1767323045.123456)
        self.assertEqual(gts._parse_time("2026-01-02T04:04:05+01:00"), 1767323045.0)
        self.assertIsNone(gts._parse_time(None))
        self.assertIsNone(gts._parse_time("yesterday"))

    def test_same_model(self):
        self.assertTrue(gts._same_model("llama3.2:latest", "llama3.2"))
        self.assertFalse(gts._same_model("llama3.2", "qwen3:8b"))
        self.assertFalse(gts._same_model("", ""))

    async def test_assign_in_request_order(self):
        f = gts.Filter()
        for key, made in (("b", 200.0), ("a", 100.0)):
            f._follows[key] = gts._Follow(f, key, "m", made, None)

        def waiter(since, model="m"):
            return {"kind": "llm", "model": model, "path": "/api/chat",
                    "since": gts.datetime.fromtimestamp(since, gts.timezone.utc).isoformat()}

        early, other, w1, w2 = waiter(90), waiter(150, "x"), waiter(150), waiter(210)
        f._assign([early, other, w1, w2])
        self.assertEqual(f._follows["a"].waiter, gts._waiter_key(w1))
        self.assertEqual(f._follows["b"].waiter, gts._waiter_key(w2))

    def test_describe(self):
        f = gts.Filter()
        fo = gts._Follow(f, "k", "m", 0, None)
        mine = {"kind": "llm", "model": "m", "since": "2026-01-02T03:04:05Z", "position": 2,
                "waiting_for": "hold", "expected_start": None}
        fo.waiter = gts._waiter_key(mine)
        st = {"state": "hold", "holds": [{"owner": "backup"}], "waiters": [mine]}
        self.assertEqual(fo.describe(st), "waiting for the GPU: a hold (backup), 2nd in line")
        self.assertIsNone(fo.describe({"state": "idle", "waiters": []}))
        self.assertTrue(fo.gone)

    async def test_events_over_http_1_0(self):
        seen = []

        async def serve(reader, writer):
            while (line := await reader.readline()) not in (b"\r\n", b""):
                seen.append(line.decode().strip())
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
                         b"retry: 2000\n\nevent: step\ndata: {}\n\n: keep-alive\n\n"
                         b'event: status\ndata: {"state":"image"}\n\n')
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            got = [st async for st in gts._events(f"http://ops:p%40ss@127.0.0.1:{port}/healthz?x=1")]
        self.assertEqual(got, [{"state": "image"}])
        self.assertEqual(seen[0], "GET /healthz?x=1 HTTP/1.0")
        self.assertIn("Accept: text/event-stream", seen)
        self.assertIn("Authorization: Basic b3BzOnBAc3M=", seen)  # ops:p@ss
        self.assertIn(f"Host: 127.0.0.1:{port}", seen)

    async def test_no_emitter_no_status(self):
        f = gts.Filter()
        body = chat_body("m")
        self.assertIs(await f.inlet(body, __metadata__={"message_id": "x"}), body)
        self.assertEqual(f._follows, {})
        rec = Recorder()
        await f.inlet(body, __event_emitter__=rec, __metadata__={"message_id": "x", "task": "title_generation"})
        self.assertEqual((f._follows, rec.statuses), ({}, []))

    async def test_forgets_answers_that_never_came(self):
        f = gts.Filter()
        f.valves.status_url = "http://127.0.0.1:9/healthz"  # nothing listens: the follow ends
        await f.inlet(chat_body("m"), __event_emitter__=Recorder(), __metadata__={"message_id": "old"})
        f._follows["old"].made -= f.valves.follow_seconds + 1
        await f.inlet(chat_body("m"), __event_emitter__=Recorder(), __metadata__={"message_id": "new"})
        self.assertEqual(list(f._follows), ["new"])
        f._end("new")


if __name__ == "__main__":
    unittest.main()

"""`memscape mcp`, driven by the official MCP client (the `mcp` package from PyPI): it lists its
tools, answers doctor, stats, what-if, diff, ranks and check on real and generated snapshots
with the same figures as the command line's JSON, and answers a missing file, a hostile file
and malformed requests with MCP errors while it keeps serving.

Run by scripts/test in the test environment (target/python/test), after the wheel is
installed: the server is the wheel's `memscape`.
"""

from __future__ import annotations

import asyncio
import json
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

import memscape

# This folder's helper, whether unittest was started by discovery or on a file's path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CORPUS = corpus.DIR
OOM = CORPUS / "pt20-flexgen-opt-oom-history.pickle"
SIBLING = CORPUS / "pt20-flexgen-opt1.3b-history.pickle"
TOOLS = {"open", "stats", "doctor", "what_if", "categories", "largest", "flame", "search", "state", "diff", "ranks", "check"}


def cli(*args: str, ok: bool = True) -> Any:
    out = subprocess.run([str(memscape.binary()), *args], capture_output=True, text=True)
    if ok:
        assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def synth(path: Path, *extra: str, seed: int = 5) -> Path:
    subprocess.run([str(memscape.binary()), "synth", "--entries", "12000", "--layers", "6", "--seed", str(seed), *extra,
                    "-o", str(path)], check=True, capture_output=True)
    return path


class Client:
    """One server, one session: `call` returns (structured answer, error text)."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, tool: str, args: Dict[str, Any]) -> Dict[str, Any]:
        r = await self.session.call_tool(tool, args)
        assert not r.is_error, f"{tool}: {r.content[0].text if r.content else r}"
        assert r.structured_content is not None, tool
        return dict(r.structured_content)

    async def error(self, tool: str, args: Dict[str, Any]) -> str:
        r = await self.session.call_tool(tool, args)
        assert r.is_error, f"{tool} {args}: expected an error, got {r.structured_content}"
        text: str = r.content[0].text  # type: ignore[union-attr]
        return text


async def with_server(body: Any) -> None:
    params = StdioServerParameters(command=str(memscape.binary()), args=["mcp"])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            await body(s, Client(s))


def run(body: Any) -> None:
    asyncio.run(with_server(body))


class McpServer(unittest.TestCase):
    def test_lists_its_tools_each_with_a_schema_and_a_description(self) -> None:
        async def body(s: ClientSession, c: Client) -> None:
            tools = (await s.list_tools()).tools
            self.assertEqual({t.name for t in tools}, TOOLS)
            for t in tools:
                self.assertGreater(len(t.description or ""), 80, t.name)
                self.assertEqual(t.input_schema.get("type"), "object", t.name)
        run(body)

    def test_doctor_stats_and_what_if_equal_the_command_line_on_the_corpus_oom(self) -> None:
        # The corpus file was dumped at an out-of-memory error (its trace has no `oom` event:
        # the doctor reads its final state); a generated run ends with one.
        doctor = cli("doctor", "--json", str(OOM))
        stats = cli("stats", "--json", str(OOM))
        with tempfile.TemporaryDirectory() as tmp:
            generated = synth(Path(tmp) / "oom.pickle", "--oom")
            doctor_generated = cli("doctor", "--json", str(generated))
            run(lambda s, c: self.generated_oom(c, generated, doctor_generated))

        async def body(s: ClientSession, c: Client) -> None:
            opened = await c.call("open", {"path": str(OOM)})
            d = opened["default_device"]
            self.assertEqual(d, doctor["device"])
            got = await c.call("doctor", {"path": str(OOM)})
            self.assertEqual(got["ooms"], [])
            self.assertIsNotNone(doctor["at_end"])
            for k in ("figures", "verdict", "why", "assumption"):
                self.assertEqual(got["at_end"][k], doctor["at_end"][k], k)
            self.assertEqual(got["at_end"]["holders"], doctor["at_end"]["holders"][:10])
            self.assertEqual(got["peak"], {**doctor["peak"], "holders": doctor["peak"]["holders"][:10]})
            self.assertEqual(got["what_if"], doctor["what_if"])

            st = await c.call("stats", {"path": str(OOM), "limit": 1000})
            device = next(x for x in stats["devices"] if x["device"] == d)
            self.assertEqual(st["summary"], device)
            cats = next(x for x in stats["categories"] if x["device"] == d)
            self.assertEqual(st["categories"], cats)
            self.assertEqual(st["peak"]["bytes"], cats["peak_bytes"])

            w = await c.call("what_if", {"path": str(OOM), "batch_factor": 1.5})
            predicted = {r["key"]: r["predicted_peak"]["bytes"] for r in w["what_if"]}
            for r in doctor["what_if"]:
                self.assertEqual(predicted[r["key"]], r["predicted_peak_bytes"], r["key"])
            self.assertIn("batch:x1.5", predicted)

            # The other views answer on the same open file, compactly.
            cat = await c.call("categories", {"path": str(OOM)})
            self.assertEqual(sum(v["bytes"] for v in cat["by_category"].values()), cats["peak_bytes"])
            big = await c.call("largest", {"path": str(OOM), "limit": 3})
            self.assertEqual(len(big["largest"]), 3)
            sizes = [r["size"]["bytes"] for r in big["largest"]]
            self.assertEqual(sizes, sorted(sizes, reverse=True))
            fl = await c.call("flame", {"path": str(OOM), "limit": 5})
            self.assertEqual(fl["total"]["bytes"], cats["peak_bytes"])
            self.assertLessEqual(len(fl["lines"]), 5)
            found = await c.call("search", {"path": str(OOM), "query": big["largest"][0]["address"], "mode": "address"})
            self.assertGreaterEqual(found["matches"], 1)
            state = await c.call("state", {"path": str(OOM)})
            self.assertEqual(state["reserved"]["bytes"], device["reserved_bytes"])
            # Compact by default: a few thousand tokens at most.
            for tool in ("doctor", "stats", "categories", "largest", "flame"):
                r = await s.call_tool(tool, {"path": str(OOM)})
                self.assertLess(len(r.content[0].text), 40_000, tool)  # type: ignore[union-attr]
        run(body)

    async def generated_oom(self, c: Client, path: Path, doctor: Dict[str, Any]) -> None:
        got = await c.call("doctor", {"path": str(path)})
        self.assertEqual(len(got["ooms"]), len(doctor["ooms"]))
        self.assertGreater(len(doctor["ooms"]), 0)
        for ours, theirs in zip(got["ooms"], doctor["ooms"]):
            for k in ("entry", "requested_bytes", "device_free_bytes", "reserved_bytes", "allocated_bytes",
                      "cached_free_bytes", "largest_free_block_bytes", "verdict", "why", "categories", "advice"):
                self.assertEqual(ours[k], theirs[k], k)
            self.assertEqual(ours["holders"], theirs["holders"][:10])
        self.assertIsNone(doctor["at_end"])
        self.assertEqual(got["at_end"], doctor["at_end"])
        opened = await c.call("open", {"path": str(path)})
        self.assertEqual(opened["devices_with_oom"], [doctor["device"]])

    def test_an_allocator_what_if_equals_the_command_line_and_avoids_a_fragmentation_oom(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            generated = synth(Path(tmp) / "frag.pickle", "--fragmentation-oom")
            doctor = cli("doctor", "--json", str(generated))
            replayed = cli("replay", "--json", "--alloc-conf", "expandable_segments:True", str(generated))
            offered = {t["conf"]: t for t in doctor["allocator_what_if"]}
            self.assertEqual(offered["expandable_segments:True"], replayed["devices"][0]["what_if"])
            self.assertEqual(offered["expandable_segments:True"]["recorded_ooms_avoided"], 1)

            async def body(s: ClientSession, c: Client) -> None:
                w = await c.call("what_if", {"path": str(generated), "alloc_conf": "expandable_segments:True"})
                self.assertEqual(w["allocator"], [offered["expandable_segments:True"]])
                self.assertIn("would not happen", w["allocator"][0]["sentence"])
                bad = await c.error("what_if", {"path": str(generated), "alloc_conf": "expandable_segments:maybe"})
                self.assertIn("expandable_segments:maybe", str(bad))
            run(body)

    def test_diff_ranks_and_check_equal_the_command_line(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            base = synth(t / "base.pickle")
            peak = cli("stats", "--json", str(base))["categories"][0]["peak_bytes"]
            grown = synth(t / "grown.pickle", "--extra-activation", str(int(peak * 0.05)))
            ranks = t / "run"
            ranks.mkdir()
            for k, extra in enumerate(["0", "0", "1G", "0"]):
                synth(ranks / f"rank{k}.pickle", "--extra-activation", extra)
            diff = cli("diff", "--json", str(OOM), str(SIBLING))
            overview = cli("ranks", "--json", str(ranks))
            check = cli("check", str(grown), "--baseline", str(base), "--max-growth", "2", "--format", "json", ok=False)

            async def body(s: ClientSession, c: Client) -> None:
                d = await c.call("diff", {"a": str(OOM), "b": str(SIBLING), "limit": 5})
                for k in ("peak", "reserved", "categories", "align"):
                    self.assertEqual(d[k], diff[k], k)
                self.assertEqual(d["sites"], diff["sites"][:5])
                self.assertEqual(d["sites_count"], len(diff["sites"]))
                self.assertNotIn("curve", d)
                r = await c.call("ranks", {"paths": [str(ranks)]})
                self.assertEqual(r["ranks"], overview["ranks"])
                self.assertEqual(r["outliers"], overview["outliers"])
                self.assertEqual(r["outliers"][0]["rank"], 2)
                ch = await c.call("check", {"run": str(grown), "baseline": str(base), "max_growth_pct": 2})
                self.assertEqual(ch, check)
                self.assertFalse(ch["passed"])
                self.assertEqual(ch["grown"][0]["site"], "model.py:230:Head.forward")
                same = await c.call("check", {"run": str(base), "baseline": str(base), "max_growth_pct": 0,
                                              "max_category_bytes": {"optimizer_state": 1 << 40}})
                self.assertTrue(same["passed"])
            run(body)

    def test_a_profiler_trace_opens_and_answers_as_the_command_line_does(self) -> None:
        trace = ROOT / "testdata" / "profiler" / "cpu-mlp-adamw.pt.trace.json.gz"
        stats = cli("stats", "--json", str(trace))

        async def body(s: ClientSession, c: Client) -> None:
            opened = await c.call("open", {"path": str(trace)})
            d = opened["default_device"]
            st = await c.call("stats", {"path": str(trace), "limit": 1000})
            self.assertEqual(st["summary"], next(x for x in stats["devices"] if x["device"] == d))
            largest = await c.call("largest", {"path": str(trace)})
            self.assertTrue(largest, "the trace's largest allocations")

        run(body)

    def test_bad_input_gets_errors_and_the_server_keeps_serving(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            marker = t / "pwned"
            hostile = t / "hostile.pickle"
            # A pickle that would run `touch` if anything executed it.
            hostile.write_bytes(b"\x80\x04cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")

            async def body(s: ClientSession, c: Client) -> None:
                self.assertIn("cannot open", await c.error("doctor", {"path": str(t / "missing.pickle")}))
                text = await c.error("stats", {"path": str(hostile)})
                self.assertIn(str(hostile), text)
                self.assertFalse(marker.exists(), "the hostile pickle ran")
                self.assertIn("path", await c.error("doctor", {"paht": 3}))
                await c.error("search", {"path": str(OOM), "query": "(", "mode": "regex"})
                await c.error("categories", {"path": str(OOM), "step": 1 << 30})
                await c.error("check", {"run": str(OOM)})
                with self.assertRaises(MCPError):
                    await s.call_tool("nonexistent_tool", {})
                opened = await c.call("open", {"path": str(OOM)})
                self.assertEqual(opened["default_device"], 0)
            run(body)

    def test_a_file_written_again_is_read_again(self) -> None:
        # The agent's loop: record step.pickle, ask; change the script, record it again, ask again.
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "step.pickle"
            shutil.copyfile(OOM, path)
            before = cli("stats", "--json", str(OOM))["categories"][0]["peak_bytes"]
            after = cli("stats", "--json", str(SIBLING))["categories"][0]["peak_bytes"]
            self.assertNotEqual(before, after)

            async def body(s: ClientSession, c: Client) -> None:
                first = await c.call("stats", {"path": str(path)})
                self.assertEqual(first["peak"]["bytes"], before)
                shutil.copyfile(SIBLING, path)
                again = await c.call("stats", {"path": str(path)})
                self.assertEqual(again["peak"]["bytes"], after, "the file as it is now, not as it was")
                doctor = await c.call("doctor", {"path": str(path)})
                self.assertEqual(doctor["peak"]["peak_bytes"], after)
                path.unlink()
                gone = await c.error("stats", {"path": str(path)})
                self.assertIn(str(path), gone)
            run(body)

    def test_a_line_that_is_not_json_rpc_gets_an_error_and_the_next_request_an_answer(self) -> None:
        # Below the client library: raw lines on the server's standard input.
        p = subprocess.Popen([str(memscape.binary()), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        assert p.stdin is not None and p.stdout is not None

        def send(obj: Any) -> None:
            assert p.stdin is not None
            p.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
            p.stdin.flush()

        # Lines read by a thread, so that a reply that never comes fails the test, not hangs it.
        lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in p.stdout or []], daemon=True).start()

        def answer() -> Dict[str, Any]:
            try:
                out: Dict[str, Any] = json.loads(lines.get(timeout=20))
            except queue.Empty:
                self.fail("no reply within 20 s")
            return out

        try:
            send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
            self.assertIn("result", answer())
            send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            # JSON-RPC's parse error, with a null id, for a line that is not JSON...
            send("{this is not json")
            parse = answer()
            self.assertEqual(parse.get("id", "missing"), None, parse)
            self.assertEqual(parse["error"]["code"], -32700, parse)
            # ... its invalid request for JSON that is not JSON-RPC, with the id it gave...
            send({"id": 7, "method": "tools/list"})
            invalid = answer()
            self.assertEqual((invalid["id"], invalid["error"]["code"]), (7, -32600), invalid)
            # ... and the server goes on answering.
            send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            listed = answer()
            self.assertEqual(listed["id"], 2)
            names = {t["name"] for t in listed["result"]["tools"]}
            self.assertEqual(names, TOOLS)
        finally:
            p.stdin.close()
            p.wait(timeout=10)
            p.stdout.close()
            if p.stderr is not None:
                p.stderr.close()


if __name__ == "__main__":
    unittest.main()

"""A counting HTTP proxy for the peer benchmark: forwards every request from 127.0.0.1:PORT to
the test server at UPSTREAM over a connection of its own per client connection, and counts the
requests by SQS action (the JSON protocol's X-Amz-Target, or the query protocol's Action).

GET /__counts answers the counts as JSON; GET /__counts?reset=1 answers them and starts again.
Both the crate's bench and the peer go through it, so both pay the same extra hop.

With DELAY_MS, every request waits that long before it is forwarded, as if the server were
that many milliseconds of network away (the round trip grows by DELAY_MS).

    python counting_proxy.py PORT UPSTREAM_URL [DELAY_MS]
"""

import asyncio
import json
import sys
import urllib.parse
from collections import Counter

counts: Counter = Counter()
delay = 0.0


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return head, headers, body


def action_of(head: bytes, headers: dict[str, str], body: bytes) -> str:
    target = headers.get("x-amz-target")
    if target:
        return target.rsplit(".", 1)[-1]
    query = urllib.parse.parse_qs(body.decode("latin-1"))
    return query.get("Action", ["other"])[0]


async def answer_counts(writer: asyncio.StreamWriter, head: bytes) -> None:
    body = json.dumps(dict(counts)).encode()
    if b"reset=1" in head.split(b"\r\n", 1)[0]:
        counts.clear()
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    await writer.drain()


async def pipe_responses(upstream: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
    try:
        while data := await upstream.read(65536):
            client.write(data)
            await client.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        client.close()


async def serve(reader, writer, host: str, port: int) -> None:
    upstream_reader = upstream_writer = None
    responses = None
    try:
        while True:
            try:
                head, headers, body = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if head.startswith(b"GET /__counts"):
                await answer_counts(writer, head)
                continue
            counts[action_of(head, headers, body)] += 1
            if delay:
                await asyncio.sleep(delay)
            if upstream_writer is None:
                upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
                responses = asyncio.create_task(pipe_responses(upstream_reader, writer))
            upstream_writer.write(head + body)
            await upstream_writer.drain()
    finally:
        if upstream_writer is not None:
            upstream_writer.close()
        if responses is not None:
            responses.cancel()
        writer.close()


async def main() -> None:
    global delay
    port, upstream = int(sys.argv[1]), urllib.parse.urlsplit(sys.argv[2])
    delay = int(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.0
    server = await asyncio.start_server(
        lambda r, w: serve(r, w, upstream.hostname, upstream.port), "127.0.0.1", port
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())

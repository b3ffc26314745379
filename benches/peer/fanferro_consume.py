"""W1 and W5 with fanferro (the peer): MESSAGES (5,000) queued before the consumer starts, each
acked by returning from the handler, with CONCURRENCY (10) and POLLERS (1), fanferro's own
defaults. Prints one JSON line: messages per second (to the last handler's return), requests
per message by action (counted by the proxy the consumer goes through), and CPU per message of
this process and of the test server.

    SQS_TEST_ENDPOINT=<proxy> SQS_UPSTREAM=<server> SQS_TEST_SERVER_PID=<pid> \
        [MESSAGES=n] [CONCURRENCY=n] [POLLERS=n] python fanferro_consume.py
"""

import asyncio
import json
import os
import time
import urllib.request

import fanferro

MESSAGES = int(os.environ.get("MESSAGES", "5000"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "10"))
POLLERS = int(os.environ.get("POLLERS", "1"))
AUTH = (
    "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request, "
    "SignedHeaders=host, Signature=0"
)


def call(endpoint: str, action: str, params: dict) -> dict:
    """One SQS call in the JSON protocol, straight to `endpoint` (the queue's filling is not
    the consumer's work, and goes around the proxy)."""
    request = urllib.request.Request(
        endpoint,
        data=json.dumps(params).encode(),
        headers={
            "X-Amz-Target": f"AmazonSQS.{action}",
            "Content-Type": "application/x-amz-json-1.0",
            "Authorization": AUTH,
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def fill(upstream: str) -> str:
    name = f"bench-peer-w1-{os.getpid()}-{time.monotonic_ns()}"
    url = call(upstream, "CreateQueue", {"QueueName": name})["QueueUrl"]
    for first in range(0, MESSAGES, 10):
        entries = [{"Id": str(i), "MessageBody": f"message {i}"} for i in range(first, first + 10)]
        call(upstream, "SendMessageBatch", {"QueueUrl": url, "Entries": entries})
    return url


def server_cpu() -> float | None:
    """CPU seconds the test server has used, from /proc (None if unknown)."""
    pid = os.environ.get("SQS_TEST_SERVER_PID")
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(v) for v in fields[11:13]) / ticks


def proxy_counts(proxy: str, reset: bool) -> dict:
    with urllib.request.urlopen(f"{proxy}/__counts{'?reset=1' if reset else ''}", timeout=10) as a:
        return json.load(a)


async def consume(proxy: str, url: str) -> dict:
    handled = 0
    done = asyncio.Event()
    last = 0.0

    async def handle(message: fanferro.Message[bytes]) -> None:
        nonlocal handled, last
        handled += 1
        if handled == MESSAGES:
            last = time.monotonic()
            done.set()

    client = fanferro.Client(
        region="us-east-1", endpoint_url=proxy, credentials=fanferro.Credentials("test", "test")
    )
    queue = client.queue(url=url)
    consumer = client.consumer(queue, handle, concurrency=CONCURRENCY, pollers=POLLERS)
    async with client:
        proxy_counts(proxy, reset=True)
        start, cpu, server = time.monotonic(), time.process_time(), server_cpu()
        running = asyncio.create_task(consumer.run(install_signal_handlers=False))
        await asyncio.wait_for(done.wait(), timeout=600)
        cpu_at_last, server_at_last = time.process_time(), server_cpu()
        consumer.request_stop()
        await running
    counts = proxy_counts(proxy, reset=True)
    return {
        "consumer": f"fanferro, concurrency {CONCURRENCY}, {POLLERS} poller(s)",
        "messages": MESSAGES,
        "per_second": MESSAGES / (last - start),
        "requests_per_message": sum(counts.values()) / MESSAGES,
        "requests": {k: v / MESSAGES for k, v in sorted(counts.items())},
        "client_cpu_ms": (cpu_at_last - cpu) * 1e3 / MESSAGES,
        "server_cpu_ms": None
        if server is None
        else (server_at_last - server) * 1e3 / MESSAGES,
    }


def main() -> None:
    proxy, upstream = os.environ["SQS_TEST_ENDPOINT"], os.environ["SQS_UPSTREAM"]
    url = fill(upstream)
    print(json.dumps(asyncio.run(consume(proxy, url))))


if __name__ == "__main__":
    main()

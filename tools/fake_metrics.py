#!/usr/bin/env python3
"""Fake vLLM /metrics servers for sizing runs (tools/measure_rss.sh): one asyncio process
answering a fixed vLLM exposition on COUNT consecutive ports from BASE on 127.0.0.1, HTTP/1.1
with keep-alive (epp's scraper keeps its connections). Runs until killed.

Usage: python3 tools/fake_metrics.py BASE COUNT [EXPOSITION_FILE]
(default: a six-line exposition; tests/fixtures/metrics/vllm-0.33.0.txt is a real vLLM one).
SIGUSR1 prints "served N", the responses so far.
"""
import asyncio
import signal
import sys

SERVED = 0

BODY = (
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="m"} 1.0\n'
    b"# TYPE vllm:num_requests_waiting gauge\n"
    b'vllm:num_requests_waiting{model_name="m"} 0.0\n'
    b"# TYPE vllm:kv_cache_usage_perc gauge\n"
    b'vllm:kv_cache_usage_perc{model_name="m"} 0.25\n'
)
if len(sys.argv) > 3:
    with open(sys.argv[3], "rb") as f:
        BODY = f.read()
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)


async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                break
            global SERVED
            SERVED += 1
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(base, count):
    servers = [await asyncio.start_server(serve, "127.0.0.1", base + i) for i in range(count)]
    # SIGUSR1 prints how many responses were served so far (scrapes per second for a window).
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, lambda: print(f"served {SERVED}", flush=True))
    print(f"serving {count} fake /metrics on 127.0.0.1:{base}-{base + count - 1}", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))

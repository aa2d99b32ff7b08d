"""A tiny gRPC test client for xdsd's integration tests.

Calls one unary method (raw bytes) on TARGET and prints the responses. TARGET is a plain
address (`127.0.0.1:PORT`) or an xDS target (`xds:///LISTENER`); for the latter grpcio's own xDS
resolver reads the bootstrap file named by the environment variable GRPC_XDS_BOOTSTRAP.

Retries failed calls until --deadline seconds have passed, then exits 1. Prints to stdout:

    response: BODY                        for each successful call
and to stderr one line per failed attempt.

    python grpc_client.py --target xds:///listener [--calls 3] [--deadline 30] [--expect NAME]
"""

import argparse
import os
import sys
import time

import grpc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", required=True)
    parser.add_argument("--method", default="/xdsd.test.Echo/Call")
    parser.add_argument("--calls", type=int, default=1, help="successful calls to make")
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds for everything")
    parser.add_argument("--expect", help="fail unless every response is this body")
    args = parser.parse_args()

    if args.target.startswith("xds:") and not os.environ.get("GRPC_XDS_BOOTSTRAP"):
        print("GRPC_XDS_BOOTSTRAP is not set", file=sys.stderr, flush=True)
        return 2

    end = time.monotonic() + args.deadline
    with grpc.insecure_channel(args.target) as channel:
        call = channel.unary_unary(
            args.method, request_serializer=None, response_deserializer=None
        )
        done = 0
        attempt = 0
        while done < args.calls:
            remaining = end - time.monotonic()
            if remaining <= 0:
                print(
                    f"gave up after {attempt} attempts and {done} successful calls",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
            attempt += 1
            try:
                body = call(b"ping", timeout=min(remaining, 5.0), wait_for_ready=True)
            except grpc.RpcError as err:
                print(
                    f"attempt {attempt}: {err.code()}: {err.details()}",
                    file=sys.stderr,
                    flush=True,
                )
                time.sleep(0.2)
                continue
            text = body.decode(errors="replace")
            print(f"response: {text}", flush=True)
            if args.expect is not None and text != args.expect:
                print(f"expected {args.expect!r}, got {text!r}", file=sys.stderr, flush=True)
                return 1
            done += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A tiny gRPC test server for xdsd's integration tests.

Listens on 127.0.0.1 (port 0 by default, chosen by the OS) and answers every unary call, whatever
its method, with its own name as the raw response bytes. Prints to stdout:

    listening on 127.0.0.1:PORT          once it serves
    served METHOD from PEER              for each call

Stops on SIGTERM/SIGINT (or when killed by the test harness).

    python grpc_server.py --name server-a [--port 0]
"""

import argparse
import signal
import sys
import threading
from concurrent import futures

import grpc


class AnyUnary(grpc.GenericRpcHandler):
    """Serves any method as unary-unary with raw bytes in and out."""

    def __init__(self, name: str):
        self._name = name.encode()

    def service(self, handler_call_details):
        method = handler_call_details.method

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            print(f"served {method} from {context.peer()}", flush=True)
            return self._name

        return grpc.unary_unary_rpc_method_handler(
            handle,
            request_deserializer=None,
            response_serializer=None,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", required=True, help="the body of every response")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((AnyUnary(args.name),))
    port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    if port == 0:
        print("cannot bind 127.0.0.1", file=sys.stderr, flush=True)
        return 1
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=1).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

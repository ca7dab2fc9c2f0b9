"""LeRobot's policy server (``lerobot_peers.PolicyServer``) traced with
``stagetrace.lerobot``, in a process of its own, as a robot meets it: no
GIL shared with the robot, whose threads would otherwise decide when the
server's threads run.

``python lerobot_serve.py WORKERS MODEL_S CHUNK DT_S OBS_TIMEOUT_S``
prints ``listening <port>``, serves until a line arrives on stdin, then
prints the server's truth (``ServerTruth``, on ``perf_counter_ns``: the
host's monotonic clock, the robot's too) as one JSON line.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import grpc
from lerobot.transport import services_pb2_grpc
from lerobot_peers import ArrivalWitness, PolicyServer

from stagetrace.lerobot import trace_policy_server


def main(argv: list[str]) -> int:
    workers, model_s, chunk, dt_s, timeout_s = int(argv[0]), float(argv[1]), int(argv[2]), float(argv[3]), float(argv[4])
    server = trace_policy_server(
        PolicyServer(model_s=model_s, chunk_size=chunk, dt_s=dt_s, atol=0.05, obs_queue_timeout_s=timeout_s)
    )
    server.witness = ArrivalWitness()
    server.SendObservations = server.witness.entry(server.SendObservations)
    grpc_server = grpc.server(server.witness.pool(workers), interceptors=[server.witness])
    services_pb2_grpc.add_AsyncInferenceServicer_to_server(server, grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    print(f"listening {port}", flush=True)
    sys.stdin.readline()
    grpc_server.stop(grace=None)
    print(json.dumps(dataclasses.asdict(server.truth)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""What LeRobot's real async inference needs around it in a test, on LeRobot
0.4.4's own classes: a robot that needs no hardware, a real (tiny) policy
saved where LeRobot's factory loads it from, and the server's truth.

- ``StubArmConfig`` / ``StubArm``: a LeRobot ``Robot`` registered as a
  third-party robot type (``stagetrace_stub_arm``), found by
  ``make_robot_from_config`` as LeRobot finds a plugin's robot (the device
  class named as its config class, less ``Config``, in the config's
  module). Six joints and one camera; each action moves the first joint by
  ``STEP``, so successive observations differ by more than the policy
  server's similarity tolerance (1.0) once an action ran in between.
  The robot is not under test: LeRobot's server and client are.
- ``save_tiny_act``: an ACT policy (LeRobot's ``ACTPolicy``, a ResNet-18
  backbone with random weights: ``pretrained_backbone_weights=None``, no
  download) with its pre- and post-processors, saved with
  ``save_pretrained`` to a directory: the real ``PolicyServer`` loads it
  through ``get_policy_class`` / ``from_pretrained`` /
  ``make_pre_post_processors`` when the real ``RobotClient`` sends its
  policy instructions.
- ``Witnessed``: the truth a server keeps, per observation (keyed by the
  trace id of the call that carried it): when the call arrived (a witness
  interceptor in grpcio's serving thread, before the pool), when LeRobot's
  ``SendObservations`` started in a worker, whether LeRobot queued the
  observation and whether its policy ran on it.

Nothing here imports ``lerobot.async_inference``: its modules make a
``logs/`` folder in the working directory as they are imported, so the
server process and the test import them from a scratch directory.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from lerobot.robots import Robot, RobotConfig

#: The stub's camera frame (height, width, channels): what the robot sends.
FRAME = (96, 128, 3)
#: What the policy sees: LeRobot resizes each frame to its image feature.
POLICY_FRAME = (3, 32, 32)
JOINTS = 6
#: How far one action moves the first joint: more than the server's
#: similarity tolerance (1.0, LeRobot's ``observations_similar``).
STEP = 2.0
ROBOT_TYPE = "stagetrace_stub_arm"


@RobotConfig.register_subclass(ROBOT_TYPE)
@dataclass
class StubArmConfig(RobotConfig):
    joints: int = JOINTS
    cameras: dict[str, Any] = field(default_factory=dict)


class StubArm(Robot):
    """Joints that move by ``STEP`` per action and a constant camera frame;
    counts what LeRobot asked of it."""

    config_class = StubArmConfig
    name = ROBOT_TYPE

    def __init__(self, config: StubArmConfig) -> None:
        super().__init__(config)
        self.config = config
        self._connected = False
        self._position = 0.0
        self._frame = np.full(FRAME, 127, np.uint8)
        #: Observations taken and actions executed.
        self.observed = 0
        self.acted = 0

    @cached_property
    def observation_features(self) -> dict[str, Any]:
        return {**{f"joint_{i}.pos": float for i in range(self.config.joints)}, "front": FRAME}

    @cached_property
    def action_features(self) -> dict[str, Any]:
        return {f"joint_{i}.pos": float for i in range(self.config.joints)}

    @property
    def is_connected(self) -> bool:
        return self._connected

    def connect(self, calibrate: bool = True) -> None:
        self._connected = True

    @property
    def is_calibrated(self) -> bool:
        return True

    def calibrate(self) -> None:
        pass

    def configure(self) -> None:
        pass

    def get_observation(self) -> dict[str, Any]:
        self.observed += 1
        obs: dict[str, Any] = {f"joint_{i}.pos": 0.0 for i in range(self.config.joints)}
        obs["joint_0.pos"] = self._position
        obs["front"] = self._frame
        return obs

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        self.acted += 1
        self._position += STEP
        return action

    def disconnect(self) -> None:
        self._connected = False


def save_tiny_act(path: Path, chunk_size: int) -> Path:
    """A small ACT policy for the stub arm (state + its camera in, six joints
    out), random weights, saved with its processors; returns ``path``."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    config = ACTConfig(
        input_features={
            "observation.state": PolicyFeature(FeatureType.STATE, (JOINTS,)),
            "observation.images.front": PolicyFeature(FeatureType.VISUAL, POLICY_FRAME),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (JOINTS,))},
        device="cpu",
        chunk_size=chunk_size,
        n_action_steps=chunk_size,
        pretrained_backbone_weights=None,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        use_vae=False,
    )
    stats = {
        "observation.state": {"mean": torch.zeros(JOINTS), "std": torch.ones(JOINTS)},
        "observation.images.front": {"mean": torch.zeros(3, 1, 1), "std": torch.ones(3, 1, 1)},
        "action": {"mean": torch.zeros(JOINTS), "std": torch.ones(JOINTS)},
    }
    ACTPolicy(config).save_pretrained(path)
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    pre.save_pretrained(path)
    post.save_pretrained(path)
    return path


def trace_id(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent``, or None."""
    if not traceparent or len(traceparent) < 35:
        return None
    return traceparent[3:35]


@dataclasses.dataclass
class Observed:
    """One observation as the server met it (``perf_counter_ns``: the host's
    monotonic clock, shared by its processes): the call's arrival (the
    witness interceptor), its hand-over to the thread pool (after
    stagetrace's arrival stamp), the handler's start (grpcio called it in a
    worker), LeRobot's ``SendObservations`` started (its first line, inside
    stagetrace's wrapper), its first read of the stream and the chunk
    marked ``TRANSFER_END`` in its hands, whether LeRobot queued the
    observation and whether its policy ran on it."""

    came: int | None = None
    pooled: int | None = None
    entered: int | None = None
    started: int | None = None
    read_start: int | None = None
    read_end: int | None = None
    queued: bool | None = None
    ran: bool = False


class Witnessed:
    """The server's truth, filled by a ``PolicyServer`` subclass that only
    stamps (``lerobot_real_serve.py``): keyed by each call's trace id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_trace: dict[str, Observed] = {}
        self.local = threading.local()

    def started(self, tid: str | None) -> Observed:
        """LeRobot's ``SendObservations`` runs the call this worker entered."""
        seen = Observed(started=time.perf_counter_ns())
        self.local.trace = tid
        if tid is not None:
            with self.lock:
                self.by_trace[tid] = seen
        return seen

    def queued(self, obs: Any, queued: bool) -> None:
        tid = getattr(self.local, "trace", None)
        if tid is None:
            return
        # The observation carries its call's trace id from here on (LeRobot
        # keeps the object it unpickled: the queue, the policy's input).
        obs._stagetrace_trace = tid
        with self.lock:
            self.by_trace[tid].queued = queued

    def ran(self, obs: Any) -> None:
        tid = getattr(obs, "_stagetrace_trace", None)
        if tid is not None:
            with self.lock:
                self.by_trace[tid].ran = True

    def as_json(self) -> dict[str, Any]:
        with self.lock:
            return {k: dataclasses.asdict(v) for k, v in self.by_trace.items()}


class HandOverWitness:
    """The robot's truth: when LeRobot's ``send_observation`` called the
    gRPC stub for each observation (before stagetrace's interceptor, whose
    transport stage starts inside that call), keyed by the call's trace id.

    Two pieces: :meth:`stub` wraps the client's stub (stamps as LeRobot
    calls ``SendObservations``, into a thread-local), and the witness is
    also a client interceptor placed under stagetrace's (the channel it
    wraps), where the call's ``traceparent`` is in the metadata."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.before: dict[str, int] = {}
        self._local = threading.local()

    def stub(self, stub: Any) -> Any:
        witness = self

        class Stub:
            def __getattr__(self, name: str) -> Any:
                return getattr(stub, name)

            def SendObservations(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802
                witness._local.at = time.perf_counter_ns()
                return stub.SendObservations(*args, **kwargs)

        return Stub()

    def interceptor(self) -> Any:
        import grpc

        witness = self

        class Inner(grpc.StreamUnaryClientInterceptor):
            def intercept_stream_unary(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
                at = getattr(witness._local, "at", None)
                tid = trace_id(dict(details.metadata or ()).get("traceparent"))
                if at is not None and tid is not None:
                    with witness.lock:
                        witness.before[tid] = at
                witness._local.at = None
                return continuation(details, request_iterator)

        return Inner()

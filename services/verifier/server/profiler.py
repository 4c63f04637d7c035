"""Torch profiler traces of the engine's steps (SGLang's and vLLM's /start_profile and /stop_profile).

The verifier records only when it was started with a directory for the traces (`--profile-dir`), as
vLLM only with VLLM_TORCH_PROFILER_DIR: a trace costs time on every step and disk space. Every call
here runs on the engine thread (EngineLoop.on_engine_thread), where the forwards run, so the trace
holds them whatever thread asked. A trace is Chrome trace JSON, for Perfetto or chrome://tracing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from treespec.shared.rpc.errors import FailedPreconditionError


class ProfilerStateError(FailedPreconditionError):
    """Profiling is off, or the call does not fit whether a trace is being recorded."""


@dataclass
class _Recording:
    profile: profile
    path: Path
    steps_left: int | None  # None: until stopped


@dataclass
class EngineProfiler:
    directory: Path | None  # None: profiling is off
    device: str = "cpu"
    _recording: _Recording | None = field(default=None, init=False)

    @property
    def recording(self) -> bool:
        return self._recording is not None

    def start(self, num_steps: int = 0, record_shapes: bool = False) -> Path:
        """Start recording; where the trace will be written. `num_steps`: stop after that many
        engine steps (0: at `stop`)."""
        if self.directory is None:
            raise ProfilerStateError("profiling is off: start the verifier with --profile-dir DIR")
        if self._recording is not None:
            raise ProfilerStateError(f"a trace is being recorded already (to {self._recording.path})")
        self.directory.mkdir(parents=True, exist_ok=True)
        activities = [ProfilerActivity.CPU]
        if self.device.startswith("cuda") and torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        recorder = profile(activities=activities, record_shapes=record_shapes)
        recorder.start()
        path = self.directory / f"treespec-verifier-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns()}.json"
        self._recording = _Recording(recorder, path, num_steps or None)
        return path

    def stepped(self) -> Path | None:
        """After an engine step: the trace's path if this step ended a recording of `num_steps`."""
        recording = self._recording
        if recording is None or recording.steps_left is None:
            return None
        recording.steps_left -= 1
        return self.stop() if recording.steps_left <= 0 else None

    def stop(self) -> Path:
        """Stop recording and write the trace; its path."""
        recording = self._recording
        if recording is None:
            raise ProfilerStateError("no trace is being recorded (POST /start_profile first)")
        self._recording = None
        recording.profile.stop()
        recording.profile.export_chrome_trace(str(recording.path))
        return recording.path

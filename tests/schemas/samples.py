"""One realistic sample of every event type, keyed by its tag: the v1 shapes behind golden/v1/."""

from __future__ import annotations

import msgspec

from voltbus.schemas import (
    LLM,
    AnyEvent,
    AttemptClaimed,
    AttemptFailed,
    AttemptHeartbeatSent,
    AttemptMarkedUnresponsive,
    AttemptStarted,
    AttemptSucceeded,
    AttemptTimedOut,
    AttemptUpdated,
    CheckpointSaved,
    ErrorInfo,
    GatewayPaused,
    GatewayResumed,
    GenericResource,
    GpuStats,
    HeartbeatStats,
    ModelCalled,
    PromptTemplate,
    ProxyLLM,
    ResourcesPublished,
    RewardReported,
    RolloutCancelled,
    RolloutConfig,
    RolloutFailed,
    RolloutQueued,
    RolloutRequeued,
    RolloutStarted,
    RolloutUpdated,
    RunFinished,
    RunStarted,
    SpanBatch,
    SpanEventInfo,
    SpanRecorded,
    SpanStatus,
    StepCompleted,
    StepStarted,
    Usage,
    WeightsRef,
    WorkerStatusReported,
    derive_id,
)


def _json(value: object) -> msgspec.Raw:
    """Compact JSON, as the encoder writes it, so a decoded sample compares equal."""
    return msgspec.Raw(msgspec.json.encode(value))


RID, AID, T0 = "ro-7f3a", "at-7f3a-1", 1_767_225_600.25
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
TRACE, SPAN, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "53995c3f42cd8ad8"
REQUEST = {"model": "qwen2.5-0.5b", "messages": [{"role": "user", "content": "2+2?"}], "logprobs": True}
RESPONSE = {"id": "chatcmpl-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}}]}

_events: list[AnyEvent] = [
    RolloutQueued(
        event_id=derive_id(RID, "queued"),
        rollout_id=RID,
        input=_json({"question": "What is 2+2?", "answer": "4"}),
        mode="train",
        resources_id="rs-3",
        config=RolloutConfig(
            timeout_seconds=600.0,
            unresponsive_seconds=60.0,
            max_attempts=3,
            retry_condition=["failed", "timeout"],
        ),
        metadata={"dataset": _json("gsm8k"), "row": _json(17)},
        queued_at=T0,
    ),
    RolloutRequeued(
        event_id=derive_id(RID, "requeued", 1),
        rollout_id=RID,
        attempt_id=AID,
        attempt_status="timeout",
        reason="attempt 1 ran past 600 s",
        at=T0 + 601,
    ),
    AttemptClaimed(
        event_id=derive_id(RID, "claim", 1),
        rollout_id=RID,
        attempt_id=AID,
        sequence_id=1,
        worker_id="Worker-0",
        at=T0 + 1,
    ),
    AttemptStarted(event_id=derive_id(RID, "started", 1), rollout_id=RID, attempt_id=AID, at=T0 + 1.5),
    AttemptSucceeded(event_id=derive_id(RID, "succeeded", 1), rollout_id=RID, attempt_id=AID, at=T0 + 9),
    AttemptFailed(
        event_id=derive_id(RID, "failed", 1),
        rollout_id=RID,
        attempt_id=AID,
        error=ErrorInfo(type="ValueError", message="bad tool call", traceback="Traceback ...\nValueError"),
        at=T0 + 9,
    ),
    AttemptTimedOut(
        event_id=derive_id(RID, "timeout", 1),
        rollout_id=RID,
        attempt_id=AID,
        timeout_seconds=600.0,
        at=T0 + 601,
    ),
    AttemptMarkedUnresponsive(
        event_id=derive_id(RID, "unresponsive", 1),
        rollout_id=RID,
        attempt_id=AID,
        last_heartbeat_at=T0 + 30,
        at=T0 + 91,
    ),
    RolloutFailed(
        event_id=derive_id(RID, "failed"),
        rollout_id=RID,
        attempt_id="at-7f3a-3",
        reason="3 of 3 attempts failed",
        at=T0 + 1800,
    ),
    RolloutCancelled(event_id=derive_id(RID, "cancelled"), rollout_id=RID, reason="run stopped", at=T0 + 5),
    RolloutStarted(
        event_id=derive_id("ro-direct", "started"),
        rollout_id="ro-direct",
        input=_json({"question": "3*3?"}),
        mode="val",
        resources_id="rs-3",
        config=RolloutConfig(timeout_seconds=60.0),
        metadata={"source": _json("dev")},
        attempt_id="at-direct-1",
        worker_id="Worker-1",
        at=T0 + 6,
    ),
    RolloutUpdated(
        event_id=derive_id(RID, "updated", 1),
        rollout_id=RID,
        mode="test",
        metadata={"note": _json({"k": [1, 2]})},
        at=T0 + 7,
    ),
    AttemptUpdated(event_id=derive_id(RID, AID, "updated"), rollout_id=RID, attempt_id=AID, worker_id=None, at=T0 + 7),
    ResourcesPublished(
        event_id=derive_id("rs-3"),
        resources_id="rs-3",
        name="default",
        version=3,
        resources={
            "main_llm": LLM(
                endpoint="http://127.0.0.1:8000/v1",
                model="qwen2.5-0.5b",
                sampling_parameters={
                    "temperature": 0.7,
                    "max_tokens": 512,
                    "stop": "</answer>",
                    "logprobs": True,
                },
                weights=WeightsRef(uri="file:///ckpt/step-20/model.safetensors", sha256=SHA),
            ),
            "proxy": ProxyLLM(endpoint="http://127.0.0.1:4000", model="qwen2.5-0.5b", api_key="sk-test"),
            "system_prompt": PromptTemplate(template="Solve: {question}", engine="f-string"),
            "tools": GenericResource(value=_json(["calculator", "search"])),
        },
        created_at=T0 - 60,
    ),
    RunStarted(
        event_id=derive_id("run-1", "started"),
        run_id="run-1",
        algorithm="grpo",
        config=_json({"lr": 1e-6, "group_size": 8, "kl_coef": 0.0}),
        at=T0 - 120,
    ),
    StepStarted(
        event_id=derive_id("run-1", "started", 20),
        run_id="run-1",
        step=20,
        resources_id="rs-3:20",
        rollout_ids=["ro-7f3a", "ro-7f3b"],
        at=T0 - 90,
    ),
    StepCompleted(
        event_id=derive_id("run-1", "step", 20),
        run_id="run-1",
        step=20,
        metrics={"train/loss": 0.412, "train/reward_mean": 0.625},
        resources_id="rs-3",
        at=T0 - 61,
    ),
    CheckpointSaved(
        event_id=derive_id("run-1", "ckpt", 20),
        run_id="run-1",
        step=20,
        uri="file:///ckpt/step-20/model.safetensors",
        sha256=SHA,
        at=T0 - 62,
    ),
    RunFinished(
        event_id=derive_id("run-1", "finished"),
        run_id="run-1",
        status="failed",
        reason="learner out of memory",
        at=T0 + 3600,
    ),
    WorkerStatusReported(
        event_id=derive_id("Worker-0", T0 + 10),
        worker_id="Worker-0",
        status="busy",
        current_rollout_id=RID,
        current_attempt_id=AID,
        heartbeat_stats=HeartbeatStats(
            cpu_name="AMD EPYC",
            cpu_cores=8,
            cpu_threads=16,
            cpu_usage_pct=37.5,
            mem_used_gb=12.1,
            mem_total_gb=64.0,
            mem_pct=18.9,
            host="node-1",
            os="Linux",
            gpus=[GpuStats(gpu=0, util_pct=91.0, mem_used_mb=60_000.0, mem_total_mb=81_920.0, temp_c=67.0)],
        ),
        at=T0 + 10,
    ),
    GatewayPaused(
        event_id=derive_id("gw-8766", "paused", 1),
        gateway_id="gw-8766",
        reason="weight swap to default:4",
        retry_after_s=5,
        inflight=3,
        at=T0 + 40,
    ),
    GatewayResumed(event_id=derive_id("gw-8766", "resumed", 1), gateway_id="gw-8766", paused_s=2.5, at=T0 + 42.5),
    SpanRecorded(
        event_id=derive_id(RID, "span", SPAN),
        rollout_id=RID,
        attempt_id=AID,
        sequence_id=4,
        trace_id=TRACE,
        span_id=SPAN,
        parent_id=PARENT,
        name="agentlightning.reward",
        start_time=T0 + 8.5,
        end_time=T0 + 8.5,
        attributes={"reward": 1.0, "tags": ["final", "exact"], "ok": True, "tokens": [3, 4]},
        events=[SpanEventInfo(name="checked", timestamp=T0 + 8.5, attributes={"answer": "4"})],
        status=SpanStatus(status_code="OK"),
        resource_attributes={"service.name": "calc-agent"},
    ),
    ModelCalled(
        event_id=derive_id(RID, "call", "call-1"),
        rollout_id=RID,
        attempt_id=AID,
        call_id="call-1",
        resources_id="rs-3",
        model="qwen2.5-0.5b",
        request=_json(REQUEST),
        response=_json(RESPONSE),
        prompt_ids=[151644, 872, 198, 17, 10, 17, 30],
        response_ids=[19, 151645],
        logprobs=[-0.0123, -0.0001],
        latency_s=0.184,
        usage=Usage(prompt_tokens=7, completion_tokens=2, total_tokens=9),
        at=T0 + 2,
    ),
    RewardReported(
        event_id=derive_id(RID, "reward", AID),
        rollout_id=RID,
        attempt_id=AID,
        value=1.0,
        dimensions={"correct": 1.0, "format": 0.5},
        primary_key="correct",
        call_id="call-1",
        at=T0 + 8.5,
    ),
    AttemptHeartbeatSent(
        event_id=derive_id(RID, "hb", 3), rollout_id=RID, attempt_id=AID, worker_id="Worker-0", at=T0 + 30
    ),
]

_batched = [e for e in _events if isinstance(e, SpanRecorded | RewardReported)]
_events.append(SpanBatch(event_id=derive_id("span-batch", *(e.event_id for e in _batched)), events=_batched))
"""A flush of a span and its reward, as ``EventLog.publish_spans`` stores them (one message)."""

SAMPLES: dict[str, AnyEvent] = {type(e).__name__: e for e in _events}
"""Tag -> sample event. Keep these values: golden/v1 files were encoded from them."""

-- name: schema
-- Telemetry rows, one per event (append-only): spans, model calls, rewards, and each attempt's last sign of life.
CREATE TABLE IF NOT EXISTS spans (
    seq BIGINT NOT NULL,
    event_id VARCHAR NOT NULL,
    rollout_id VARCHAR NOT NULL,
    attempt_id VARCHAR NOT NULL,
    sequence_id INTEGER NOT NULL,
    trace_id VARCHAR NOT NULL,
    span_id VARCHAR NOT NULL,
    parent_id VARCHAR,
    name VARCHAR NOT NULL,
    start_time DOUBLE,
    end_time DOUBLE,
    status_code VARCHAR,
    status_description VARCHAR,
    attributes JSON,
    events JSON,
    resource_attributes JSON,
    seq_index INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS model_calls (
    seq BIGINT NOT NULL,
    event_id VARCHAR NOT NULL,
    rollout_id VARCHAR NOT NULL,
    attempt_id VARCHAR NOT NULL,
    call_id VARCHAR NOT NULL,
    resources_id VARCHAR,
    model VARCHAR,
    request JSON,
    response JSON,
    prompt_ids INTEGER[],
    response_ids INTEGER[],
    logprobs DOUBLE[],
    latency_s DOUBLE,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    total_tokens INTEGER,
    status VARCHAR,
    error VARCHAR,
    recorded_at DOUBLE,
    finish_reason VARCHAR,
    http_status INTEGER,
    upstream VARCHAR,
    retries INTEGER,
    rewritten VARCHAR[],
    streamed BOOLEAN,
    mode VARCHAR,
    choices JSON,
    seq_index INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rewards (
    seq BIGINT NOT NULL,
    event_id VARCHAR NOT NULL,
    rollout_id VARCHAR NOT NULL,
    attempt_id VARCHAR NOT NULL,
    value DOUBLE,
    dimensions JSON,
    primary_key VARCHAR,
    call_id VARCHAR,
    recorded_at DOUBLE,
    seq_index INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS attempt_activity (
    rollout_id VARCHAR NOT NULL,
    attempt_id VARCHAR NOT NULL,
    last_seen DOUBLE NOT NULL,
    events BIGINT NOT NULL,
    first_seq BIGINT NOT NULL,
    last_seq BIGINT NOT NULL,
    PRIMARY KEY (rollout_id, attempt_id)
);
-- An attempt's rows found by its id alone: a training refresh looks up a few attempts among all (the two-column key
-- is not used for lookups; a join on it reads the whole table at every commit).
CREATE INDEX IF NOT EXISTS attempt_activity_by_attempt ON attempt_activity (attempt_id);
-- A rollout's attempts found by its id alone: where its spans lie in the stream (first_seq .. last_seq), which a store
-- query reads instead of the whole spans table (queries/store.sql, query_spans).
CREATE INDEX IF NOT EXISTS attempt_activity_by_rollout ON attempt_activity (rollout_id);

-- name: SpanRecorded
-- Append one row per recorded span.
INSERT INTO spans BY NAME SELECT * FROM batch;

-- name: ModelCalled
-- Append one row per model call, with its token ids and logprobs (JSON text in the batch, checked here).
INSERT INTO model_calls BY NAME SELECT * REPLACE (
    from_json_strict(prompt_ids, '["INTEGER"]') AS prompt_ids,
    from_json_strict(response_ids, '["INTEGER"]') AS response_ids,
    from_json_strict(logprobs, '["DOUBLE"]') AS logprobs
) FROM batch;

-- name: RewardReported
-- Append one row per reward.
INSERT INTO rewards BY NAME SELECT * FROM batch;

-- name: activity_rows
-- Add each attempt's new signs of life to its running count and latest time.
-- Not ON CONFLICT DO UPDATE: DuckDB runs it as a MERGE whose join on the two-column key scans every row of the table
-- (BENCHMARKS.md, issue 25). Joined on the attempt id alone, the rows are found through its index; the rollout id
-- (attempt ids repeat across rollouts) is matched by a filter that is not a join key. Existing rows first, then new ones.
UPDATE attempt_activity SET
    last_seen = greatest(attempt_activity.last_seen, batch.last_seen),
    events = attempt_activity.events + batch.events,
    first_seq = least(attempt_activity.first_seq, batch.first_seq),
    last_seq = greatest(attempt_activity.last_seq, batch.last_seq)
FROM batch
WHERE attempt_activity.attempt_id = batch.attempt_id
    AND starts_with(attempt_activity.rollout_id, batch.rollout_id)
    AND starts_with(batch.rollout_id, attempt_activity.rollout_id);
INSERT INTO attempt_activity BY NAME SELECT * FROM batch
WHERE NOT EXISTS (
    SELECT 1 FROM attempt_activity
    WHERE attempt_activity.attempt_id = batch.attempt_id
        AND starts_with(attempt_activity.rollout_id, batch.rollout_id)
        AND starts_with(batch.rollout_id, attempt_activity.rollout_id)
);

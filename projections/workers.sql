-- name: schema
-- Each worker's latest status snapshot.
CREATE TABLE IF NOT EXISTS workers (
    worker_id VARCHAR PRIMARY KEY,
    status VARCHAR NOT NULL,
    current_rollout_id VARCHAR,
    current_attempt_id VARCHAR,
    heartbeat_stats JSON,
    last_heartbeat_time DOUBLE,
    last_dequeue_time DOUBLE,
    last_busy_time DOUBLE,
    last_idle_time DOUBLE,
    updated_at DOUBLE NOT NULL,
    seq BIGINT NOT NULL
);

-- name: WorkerStatusReported
-- Replace the worker's row with its newest snapshot.
INSERT OR REPLACE INTO workers BY NAME SELECT * FROM batch;

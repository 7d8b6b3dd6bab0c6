-- name: schema
-- Gateway admission history: every pause and resume, in log order.
CREATE TABLE IF NOT EXISTS gateway_events (
    seq BIGINT NOT NULL,
    gateway_id VARCHAR NOT NULL,
    action VARCHAR NOT NULL,
    reason VARCHAR,
    retry_after_s INTEGER,
    inflight INTEGER,
    paused_s DOUBLE,
    versions JSON,
    recorded_at DOUBLE NOT NULL
);

-- name: GatewayPaused
-- Append one row per pause.
INSERT INTO gateway_events BY NAME SELECT * FROM batch;

-- name: GatewayResumed
-- Append one row per resume.
INSERT INTO gateway_events BY NAME SELECT * FROM batch;

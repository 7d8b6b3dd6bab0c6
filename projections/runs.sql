-- name: schema
-- Training runs, their steps' batches and metrics, and saved checkpoints.
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    algorithm VARCHAR,
    config JSON,
    status VARCHAR NOT NULL,
    reason VARCHAR,
    started_at DOUBLE,
    finished_at DOUBLE,
    seq BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    seq BIGINT NOT NULL,
    run_id VARCHAR NOT NULL,
    step INTEGER NOT NULL,
    metrics JSON,
    resources_id VARCHAR,
    recorded_at DOUBLE
);
CREATE TABLE IF NOT EXISTS step_batches (
    seq BIGINT NOT NULL,
    run_id VARCHAR NOT NULL,
    step INTEGER NOT NULL,
    resources_id VARCHAR,
    rollout_ids VARCHAR[],
    recorded_at DOUBLE
);
CREATE TABLE IF NOT EXISTS run_checkpoints (
    seq BIGINT NOT NULL,
    run_id VARCHAR NOT NULL,
    step INTEGER NOT NULL,
    uri VARCHAR NOT NULL,
    sha256 VARCHAR NOT NULL,
    recorded_at DOUBLE
);

-- name: RunStarted
-- Create the run's row.
INSERT OR REPLACE INTO runs BY NAME SELECT * FROM batch;

-- name: StepStarted
-- Append each step's batch: the policy version it samples with and its rollouts.
INSERT INTO step_batches BY NAME SELECT * FROM batch;

-- name: StepCompleted
-- Append each step's metrics.
INSERT INTO steps BY NAME SELECT * FROM batch;

-- name: CheckpointSaved
-- Append each saved checkpoint.
INSERT INTO run_checkpoints BY NAME SELECT * FROM batch;

-- name: RunFinished
-- Close the run's row with its final status.
UPDATE runs SET status = batch.status, reason = batch.reason, finished_at = batch.finished_at, seq = batch.seq
FROM batch WHERE runs.run_id = batch.run_id;

-- name: schema
-- Rollouts and attempts as the lifecycle decider's evolve folds them; rollout_states keeps each fold.
CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id VARCHAR PRIMARY KEY,
    status VARCHAR NOT NULL,
    mode VARCHAR,
    resources_id VARCHAR,
    input JSON,
    config JSON,
    metadata JSON,
    start_time DOUBLE NOT NULL,
    end_time DOUBLE,
    attempt_count INTEGER NOT NULL,
    latest_attempt_id VARCHAR,
    reason VARCHAR,
    last_seq BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    rollout_id VARCHAR NOT NULL,
    attempt_id VARCHAR NOT NULL,
    sequence_id INTEGER NOT NULL,
    status VARCHAR NOT NULL,
    worker_id VARCHAR,
    start_time DOUBLE NOT NULL,
    end_time DOUBLE,
    last_heartbeat_time DOUBLE,
    error_type VARCHAR,
    error_message VARCHAR,
    metadata JSON,
    last_seq BIGINT NOT NULL,
    PRIMARY KEY (rollout_id, attempt_id)
);
-- Attempts found by id alone (a training refresh looks up the few that ended among all of them).
CREATE INDEX IF NOT EXISTS attempts_by_attempt ON attempts (attempt_id);
CREATE TABLE IF NOT EXISTS rollout_states (
    rollout_id VARCHAR PRIMARY KEY,
    state BLOB NOT NULL
);

-- name: rollout_rows
-- Replace each touched rollout's row with its newly folded state.
INSERT OR REPLACE INTO rollouts BY NAME SELECT * FROM batch;

-- name: attempt_rows
-- Replace each touched attempt's row.
-- Not INSERT OR REPLACE: DuckDB runs it as a MERGE whose join on the two-column key scans every row of the table (the
-- cost grew with the log: BENCHMARKS.md, issue 25). Joined on the attempt id alone, the old rows are found through its
-- index; the rollout id (attempt ids repeat across rollouts) is matched by a filter that is not a join key.
DELETE FROM attempts USING batch
WHERE attempts.attempt_id = batch.attempt_id
    AND starts_with(attempts.rollout_id, batch.rollout_id) AND starts_with(batch.rollout_id, attempts.rollout_id);
INSERT INTO attempts BY NAME SELECT * FROM batch;

-- name: state_rows
-- Keep the folded state of each touched rollout, so a restart resumes the fold.
INSERT OR REPLACE INTO rollout_states BY NAME SELECT * FROM batch;

-- name: states_of
-- The stored folds of $rollout_ids (a live projector keeps only the most recently changed: prepare.STATES_KEPT).
SELECT rollout_id, state FROM rollout_states WHERE list_contains($rollout_ids, rollout_id);

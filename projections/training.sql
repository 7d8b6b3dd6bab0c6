-- name: schema
-- Training data the adapter derives from each finished attempt: triplets, trajectories, per-attempt counts, settings.
CREATE TABLE IF NOT EXISTS triplets (
    rollout_id VARCHAR NOT NULL,
    attempt_id VARCHAR NOT NULL,
    call_index INTEGER NOT NULL,
    call_id VARCHAR NOT NULL,
    choice_index INTEGER NOT NULL,
    source VARCHAR,
    agent_name VARCHAR,
    task_id VARCHAR,
    mode VARCHAR,
    resources_id VARCHAR,
    model VARCHAR,
    prompt_ids INTEGER[],
    response_ids INTEGER[],
    logprobs DOUBLE[],
    reward DOUBLE,
    return_value DOUBLE,
    dimensions JSON,
    no_token_ids BOOLEAN,
    no_logprobs BOOLEAN,
    call_failed BOOLEAN,
    truncated BOOLEAN,
    overlong_prompt BOOLEAN,
    reward_missing BOOLEAN,
    reward_not_numeric BOOLEAN,
    settings_id VARCHAR NOT NULL,
    adapter_version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS trajectories (
    rollout_id VARCHAR NOT NULL,
    attempt_id VARCHAR NOT NULL,
    row_index INTEGER NOT NULL,
    task_id VARCHAR,
    mode VARCHAR,
    call_ids VARCHAR[],
    call_resources VARCHAR[],
    resources_ids VARCHAR[],
    mixed_versions BOOLEAN,
    prompt_ids INTEGER[],
    response_ids INTEGER[],
    response_mask INTEGER[],
    logprobs DOUBLE[],
    reward DOUBLE,
    call_rewards DOUBLE[],
    dimensions JSON,
    after_mismatch BOOLEAN,
    no_logprobs BOOLEAN,
    truncated BOOLEAN,
    overlong_prompt BOOLEAN,
    reward_missing BOOLEAN,
    reward_not_numeric BOOLEAN,
    settings_id VARCHAR NOT NULL,
    adapter_version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS training_attempts (
    rollout_id VARCHAR NOT NULL,
    attempt_id VARCHAR NOT NULL,
    task_id VARCHAR,
    mode VARCHAR,
    spans INTEGER,
    calls INTEGER,
    selected INTEGER,
    outside_agent INTEGER,
    other_agent INTEGER,
    in_reward INTEGER,
    nested INTEGER,
    gateway_only INTEGER,
    span_only INTEGER,
    paired INTEGER,
    failed INTEGER,
    no_token_ids INTEGER,
    rewards INTEGER,
    rewards_unmatched INTEGER,
    rewards_unused INTEGER,
    rewards_not_numeric INTEGER,
    reward_copies_dropped INTEGER,
    prefix_mismatches INTEGER,
    triplets INTEGER,
    trajectories INTEGER,
    duplicate_spans INTEGER,
    orphans INTEGER,
    cycles_broken INTEGER,
    resources_ids VARCHAR[],
    settings_id VARCHAR NOT NULL,
    adapter_version INTEGER NOT NULL
);
-- Each table's rows of an attempt found by its id (a refresh of an attempt first takes its old rows away).
CREATE INDEX IF NOT EXISTS triplets_by_attempt ON triplets (attempt_id);
CREATE INDEX IF NOT EXISTS trajectories_by_attempt ON trajectories (attempt_id);
CREATE INDEX IF NOT EXISTS training_attempts_by_attempt ON training_attempts (attempt_id);
CREATE TABLE IF NOT EXISTS training_meta (
    settings_id VARCHAR PRIMARY KEY,
    adapter_version INTEGER NOT NULL,
    settings JSON NOT NULL
);

-- name: training_found_triplets
-- The rows of triplets of the attempts $attempt_ids, with their row ids (found by the one-column index on attempt_id:
-- a delete joined with the keys on both columns read the whole table; training.py keeps the keys' rows).
SELECT rollout_id, attempt_id, rowid FROM triplets WHERE list_contains($attempt_ids, attempt_id);

-- name: training_clear_triplets
-- Forget the triplets of the attempts about to be recomputed (the row ids training_found_triplets gave).
DELETE FROM triplets WHERE rowid = ANY($rowids);

-- name: training_found_trajectories
-- The rows of trajectories of the attempts $attempt_ids, with their row ids.
SELECT rollout_id, attempt_id, rowid FROM trajectories WHERE list_contains($attempt_ids, attempt_id);

-- name: training_clear_trajectories
-- Forget the trajectory rows of the attempts about to be recomputed (the row ids training_found_trajectories gave).
DELETE FROM trajectories WHERE rowid = ANY($rowids);

-- name: training_found_attempts
-- The rows of training_attempts of the attempts $attempt_ids, with their row ids.
SELECT rollout_id, attempt_id, rowid FROM training_attempts WHERE list_contains($attempt_ids, attempt_id);

-- name: training_clear_attempts
-- Forget the per-attempt counts of the attempts about to be recomputed (the row ids training_found_attempts gave).
DELETE FROM training_attempts WHERE rowid = ANY($rowids);

-- name: training_done
-- The attempts of $attempt_ids with their rollout and status (training.py keeps the keys asked for that have ended).
-- Found by the one-column index on attempt_id: a join with the keys on both columns, or with rollouts, reads every
-- attempt at every commit (BENCHMARKS.md, issue 4).
SELECT rollout_id, attempt_id, status FROM attempts WHERE list_contains($attempt_ids, attempt_id);

-- name: training_rollouts
-- Mode, input and metadata of the rollouts $rollout_ids (by their key's index), for the attempts training_done found.
SELECT rollout_id, mode, input, metadata FROM rollouts WHERE list_contains($rollout_ids, rollout_id);

-- name: training_from_seq
-- The lowest spans-stream sequence of any telemetry of the keys' attempts (none: the largest BIGINT). The telemetry
-- queries below read only the rows from there on, which DuckDB finds by the seq column's zone maps: without it each
-- read the key columns of every stored span, model call and reward at every commit.
SELECT coalesce(min(first_seq), 9223372036854775807) FROM attempt_activity
WHERE list_contains($attempt_ids, attempt_id);

-- name: training_missing
-- The attempts no longer in progress that have no training rows (every ended attempt has one once its refresh ran:
-- the others are computed when the projector opens the file).
SELECT a.rollout_id, a.attempt_id FROM attempts AS a
ANTI JOIN training_attempts AS t ON t.rollout_id = a.rollout_id AND t.attempt_id = a.attempt_id
WHERE NOT list_contains($active, a.status);

-- name: training_order
-- The keys ($rollout_ids, $attempt_ids) in the order their telemetry was stored (by first_seq; those without any
-- first): a pass over many attempts in chunks then reads each chunk's stretch of the telemetry tables, not all of it.
SELECT b.rollout_id, b.attempt_id
FROM (SELECT unnest($rollout_ids) AS rollout_id, unnest($attempt_ids) AS attempt_id) AS b
LEFT JOIN attempt_activity AS x ON x.rollout_id = b.rollout_id AND x.attempt_id = b.attempt_id
ORDER BY x.first_seq NULLS FIRST, b.rollout_id, b.attempt_id;

-- name: active_attempts
-- Every attempt in progress (the projector keeps them in memory: telemetry of any other may change training rows).
SELECT rollout_id, attempt_id FROM attempts WHERE list_contains($active, status);

-- name: training_spans
-- The stored spans of the attempts of the keys from $from_seq on (training_from_seq), as the adapter reads them.
-- The rows are found on the two key columns first, then fetched by rowid: a join would read (and decompress) every
-- row's attributes.
SELECT s.rollout_id, s.attempt_id, s.seq, s.seq_index, s.sequence_id, s.span_id, s.parent_id, s.name, s.attributes, s.status_code
FROM spans AS s
WHERE s.seq >= $from_seq AND s.rowid IN (
    SELECT k.rowid FROM spans AS k
    SEMI JOIN (SELECT unnest($rollout_ids) AS rollout_id, unnest($attempt_ids) AS attempt_id) AS b
        ON k.rollout_id = b.rollout_id AND k.attempt_id = b.attempt_id
    WHERE k.seq >= $from_seq
);

-- name: training_calls
-- The stored gateway model calls of the attempts of the keys (found by key, then fetched by rowid).
SELECT
    c.rollout_id, c.attempt_id, c.seq, c.seq_index, c.call_id, c.resources_id, c.model, c.response,
    c.prompt_ids, c.response_ids, c.logprobs, c.status
FROM model_calls AS c
WHERE c.seq >= $from_seq AND c.rowid IN (
    SELECT k.rowid FROM model_calls AS k
    SEMI JOIN (SELECT unnest($rollout_ids) AS rollout_id, unnest($attempt_ids) AS attempt_id) AS b
        ON k.rollout_id = b.rollout_id AND k.attempt_id = b.attempt_id
    WHERE k.seq >= $from_seq
);

-- name: training_rewards
-- The stored reward events of the attempts of the keys (found by key, then fetched by rowid).
SELECT r.rollout_id, r.attempt_id, r.seq, r.seq_index, r.event_id, r.value, r.dimensions, r.primary_key, r.call_id
FROM rewards AS r
WHERE r.seq >= $from_seq AND r.rowid IN (
    SELECT k.rowid FROM rewards AS k
    SEMI JOIN (SELECT unnest($rollout_ids) AS rollout_id, unnest($attempt_ids) AS attempt_id) AS b
        ON k.rollout_id = b.rollout_id AND k.attempt_id = b.attempt_id
    WHERE k.seq >= $from_seq
);

-- name: triplet_rows
-- Add the adapter's triplets (one per selected model call).
INSERT INTO triplets BY NAME SELECT * FROM batch;

-- name: trajectory_rows
-- Add the adapter's trajectory rows.
INSERT INTO trajectories BY NAME SELECT * FROM batch;

-- name: training_attempt_rows
-- Add the adapter's per-attempt counts.
INSERT INTO training_attempts BY NAME SELECT * FROM batch;

-- name: training_settings
-- Record the adapter settings (and code version) the training tables were built with.
INSERT OR IGNORE INTO training_meta VALUES ($settings_id, $adapter_version, $settings);

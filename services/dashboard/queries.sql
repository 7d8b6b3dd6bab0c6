-- name: rollout_statuses
-- Rollouts by status (queuing and requeuing are the queue).
SELECT status, count(*) AS n FROM rollouts GROUP BY status ORDER BY status;

-- name: attempt_statuses
-- Attempts by status.
SELECT status, count(*) AS n FROM attempts GROUP BY status ORDER BY status;

-- name: workers
-- Runner health: each worker's status, its rollout, and the age of its last heartbeat at $now.
SELECT
    worker_id,
    status,
    current_rollout_id,
    round($now - last_heartbeat_time, 1) AS heartbeat_age_s,
    round($now - updated_at, 1) AS updated_age_s
FROM workers
ORDER BY worker_id;

-- name: runs
-- Training runs, newest first, with how many steps each completed.
SELECT r.run_id, r.algorithm, r.status, r.started_at, count(DISTINCT s.step) AS steps
FROM runs AS r
LEFT JOIN steps AS s ON r.run_id = s.run_id
GROUP BY r.run_id, r.algorithm, r.status, r.started_at
ORDER BY r.started_at DESC NULLS LAST, r.run_id;

-- name: run_steps
-- One row per completed step of $run_id: reward and staleness metrics, the version sampled with and published.
WITH latest AS (
    SELECT * FROM steps WHERE run_id = $run_id
    QUALIFY row_number() OVER (PARTITION BY step ORDER BY seq DESC) = 1
),

batches AS (
    SELECT step, resources_id FROM step_batches WHERE run_id = $run_id
    QUALIFY row_number() OVER (PARTITION BY step ORDER BY seq DESC) = 1
)

SELECT
    s.step,
    b.resources_id AS sampled_with,
    s.resources_id AS published,
    try_cast(s.metrics ->> '$.reward_mean' AS DOUBLE) AS reward_mean,
    try_cast(s.metrics ->> '$.reward_std' AS DOUBLE) AS reward_std,
    try_cast(s.metrics ->> '$.staleness_mean' AS DOUBLE) AS staleness_mean,
    try_cast(s.metrics ->> '$.staleness_max' AS DOUBLE) AS staleness_max,
    try_cast(s.metrics ->> '$.rows_dropped_stale' AS DOUBLE) AS rows_dropped_stale,
    try_cast(s.metrics ->> '$.time_step_s' AS DOUBLE) AS time_step_s
FROM latest AS s
LEFT JOIN batches AS b ON s.step = b.step
ORDER BY s.step;

-- name: version_rewards
-- Mean reward of $run_id's batch rollouts per resources version they ran with, in the order versions were first used.
WITH members AS (
    SELECT DISTINCT step, resources_id AS batch_version, unnest(rollout_ids) AS rollout_id
    FROM step_batches WHERE run_id = $run_id
),

versions AS (
    SELECT m.step, m.rollout_id, coalesce(r.resources_id, m.batch_version) AS resources_id
    FROM members AS m
    LEFT JOIN rollouts AS r ON m.rollout_id = r.rollout_id
)

SELECT
    v.resources_id,
    min(v.step) AS first_step,
    count(DISTINCT v.rollout_id) AS rollouts,
    count(w.value) AS rewards,
    avg(w.value) AS reward_mean
FROM versions AS v
LEFT JOIN rewards AS w ON v.rollout_id = w.rollout_id
WHERE v.resources_id IS NOT NULL
GROUP BY v.resources_id
ORDER BY first_step, v.resources_id;

-- name: recent_rollouts
-- The newest rollouts, for the span-tree picker.
SELECT rollout_id, status, mode, start_time FROM rollouts ORDER BY start_time DESC, rollout_id LIMIT 100;

-- name: rollout
-- One rollout.
SELECT rollout_id, status, mode, resources_id, input, start_time, end_time, attempt_count, reason
FROM rollouts WHERE rollout_id = $rollout_id;

-- name: rollout_attempts
-- The attempts of $rollout_id in order.
SELECT attempt_id, sequence_id, status, worker_id, start_time, end_time, error_type, error_message
FROM attempts WHERE rollout_id = $rollout_id ORDER BY sequence_id;

-- name: rollout_spans
-- The spans of $rollout_id in sequence order (the page nests them by parent_id).
SELECT attempt_id, sequence_id, span_id, parent_id, name, start_time, end_time, status_code, attributes
FROM spans WHERE rollout_id = $rollout_id ORDER BY attempt_id, sequence_id, seq, seq_index;

-- name: rollout_calls
-- The model calls of $rollout_id with their token ids and logprobs, in the order recorded.
SELECT attempt_id, call_id, model, resources_id, status, prompt_ids, response_ids, logprobs, latency_s, recorded_at
FROM model_calls WHERE rollout_id = $rollout_id ORDER BY seq, seq_index;

-- name: rollout_rewards
-- The rewards of $rollout_id in the order reported.
SELECT attempt_id, value, dimensions, call_id, recorded_at
FROM rewards WHERE rollout_id = $rollout_id ORDER BY seq, seq_index;

-- name: data_quality
-- The data-quality counts (the data_quality view), one row per run, mode and resources version.
SELECT * FROM data_quality ORDER BY run_id NULLS LAST, mode NULLS LAST, resources_id NULLS LAST;

-- name: log_health
-- How faithfully the projection follows the log: events parked in quarantine (undecodable, unknown),
-- holes in a stream (gaps), and times the log was found to differ from what was applied (divergences).
SELECT (SELECT count(*) FROM quarantine) AS quarantined,
       (SELECT count(*) FROM gaps) AS gaps,
       (SELECT count(*) FROM divergences) AS divergences;

-- name: rollout_statuses
-- Rollouts by status (queuing and requeuing are the queue).
SELECT status, count(*) AS n FROM rollouts GROUP BY status ORDER BY status;

-- name: attempt_statuses
-- Attempts by status.
SELECT status, count(*) AS n FROM attempts GROUP BY status ORDER BY status;

-- name: workers
-- Runner health: each worker's status, its rollout, the age of its last heartbeat at $now, and whether it is stale
-- (silent for over $stale_s: stopped or hung); live ones first, in natural order (Worker-2 before Worker-10).
WITH aged AS (
    SELECT
        worker_id,
        status,
        current_rollout_id,
        round($now - last_heartbeat_time, 1) AS heartbeat_age_s,
        round($now - updated_at, 1) AS updated_age_s,
        coalesce($now - last_heartbeat_time, $now - updated_at) > $stale_s AS stale
    FROM workers
)

SELECT * FROM aged
ORDER BY
    stale,
    regexp_replace(worker_id, '[0-9]+$', ''),
    try_cast(regexp_extract(worker_id, '[0-9]+$') AS BIGINT) NULLS FIRST,
    worker_id;

-- name: runs
-- Training runs, newest first, with how many steps each completed and how many validation rollouts it ran (the
-- rollouts of mode val pinned to a version of the run's bundle, named after the run).
WITH validations AS (
    SELECT split_part(resources_id, ':', 1) AS run_id, count(*) AS n
    FROM rollouts WHERE mode = 'val' AND resources_id IS NOT NULL
    GROUP BY ALL
)

SELECT r.run_id, r.algorithm, r.status, r.reason, r.started_at, count(DISTINCT s.step) AS steps,
    coalesce(any_value(v.n), 0) AS validations
FROM runs AS r
LEFT JOIN steps AS s ON r.run_id = s.run_id
LEFT JOIN validations AS v ON r.run_id = v.run_id
GROUP BY r.run_id, r.algorithm, r.status, r.reason, r.started_at
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
-- The model calls of $rollout_id with their request and response (the page shows their text), token ids and
-- logprobs, in the order recorded.
SELECT attempt_id, call_id, model, resources_id, status, error, request, response, prompt_ids, response_ids, logprobs,
    latency_s, recorded_at
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

-- name: run_validation
-- $run_id's validation: per resources version of the run, its val rollouts (ended and all) and their mean reward
-- (each ended rollout's rewards on its latest attempt summed, 0 without one, as the learner scores it), at the step
-- that samples with that version (the step after the one that published it; the first step for the starting one).
WITH published AS (
    SELECT resources_id, min(step) + 1 AS step FROM steps WHERE run_id = $run_id AND resources_id IS NOT NULL
    GROUP BY resources_id
),

sampled AS (
    SELECT resources_id, min(step) AS step FROM step_batches WHERE run_id = $run_id GROUP BY resources_id
),

totals AS (
    SELECT rollout_id, attempt_id, sum(value) AS total FROM rewards GROUP BY rollout_id, attempt_id
),

val AS (
    SELECT
        r.resources_id,
        r.start_time,
        r.status IN ('succeeded', 'failed', 'cancelled') AS ended,
        coalesce(t.total, 0.0) AS reward
    FROM rollouts AS r
    LEFT JOIN totals AS t ON r.rollout_id = t.rollout_id AND r.latest_attempt_id = t.attempt_id
    WHERE r.mode = 'val' AND split_part(r.resources_id, ':', 1) = $run_id
)

SELECT
    v.resources_id,
    coalesce(any_value(p.step), any_value(s.step), 0) AS step,
    count(*) AS rollouts,
    count(*) FILTER (WHERE v.ended) AS ended,
    avg(v.reward) FILTER (WHERE v.ended) AS reward_mean
FROM val AS v
LEFT JOIN published AS p ON v.resources_id = p.resources_id
LEFT JOIN sampled AS s ON v.resources_id = s.resources_id
GROUP BY v.resources_id
ORDER BY step, min(v.start_time);

-- name: failures
-- The newest attempts that ended badly, with why (error type and message, the rollout's reason), newest first.
SELECT
    a.rollout_id, a.attempt_id, a.sequence_id, a.status, a.worker_id, a.end_time, a.error_type, a.error_message,
    r.status AS rollout_status, r.mode, r.reason
FROM attempts AS a
INNER JOIN rollouts AS r ON a.rollout_id = r.rollout_id
WHERE a.status IN ('failed', 'timeout', 'unresponsive')
ORDER BY a.end_time DESC NULLS LAST, a.rollout_id, a.sequence_id
LIMIT 20;

-- name: failure_causes
-- Attempts that ended badly, counted by how they ended and their error type, the most frequent first.
SELECT status, coalesce(error_type, '') AS error_type, count(*) AS n, max(end_time) AS last_end_time
FROM attempts
WHERE status IN ('failed', 'timeout', 'unresponsive')
GROUP BY ALL
ORDER BY n DESC, status, error_type
LIMIT 10;

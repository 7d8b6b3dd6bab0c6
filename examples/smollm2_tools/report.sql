-- The example's report on one run's training conversations ($run: the run id, whose batches' task ids are
-- "<run>:<step>:<i>"; $tool_call: the agent's tool-call pattern). The prefix mismatches are the projection's own
-- count (training_attempts.prefix_mismatches, which `voltbus data check` sums), not a recount.
WITH conversations AS (
    -- the run's ended training attempts, with the adapter's counts
    SELECT attempt_id, prefix_mismatches FROM training_attempts WHERE starts_with(task_id, $run || ':')
),

replies AS (
    -- every answered model call of those attempts, with the text the agent read
    SELECT m.attempt_id, json_extract_string(m.response, '$.choices[0].message.content') AS content
    FROM model_calls AS m SEMI JOIN conversations AS c ON m.attempt_id = c.attempt_id
    WHERE m.status = 'ok'
),

masks AS (
    -- the training rows the turns were stitched into: 1 on a sampled token, 0 on an observation
    SELECT t.response_mask FROM trajectories AS t SEMI JOIN conversations AS c ON t.attempt_id = c.attempt_id
)

SELECT
    (SELECT count(*) FROM conversations) AS conversations,
    (SELECT count(*) FROM replies) AS turns,
    (SELECT count(*) FROM replies WHERE regexp_matches(content, $tool_call)) AS tool_calls,
    (SELECT coalesce(sum(prefix_mismatches), 0)::BIGINT FROM conversations) AS prefix_mismatches,
    (SELECT count(*) FROM masks) AS training_rows,
    (SELECT coalesce(sum(list_sum(response_mask)), 0)::BIGINT FROM masks) AS sampled_tokens,
    (SELECT coalesce(sum(len(response_mask) - list_sum(response_mask)), 0)::BIGINT FROM masks) AS observation_tokens

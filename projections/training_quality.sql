-- name: schema
-- The view data_quality: per run, mode and resources version, everything that would silently weaken training.
CREATE OR REPLACE VIEW data_quality AS
WITH version_runs AS (
    -- the run whose step published each resources version
    SELECT resources_id, min(run_id) AS run_id FROM steps WHERE resources_id IS NOT NULL GROUP BY resources_id
),

attempts AS (
    SELECT t.*, v.run_id, r.resources_id
    FROM training_attempts AS t
    LEFT JOIN rollouts AS r ON t.rollout_id = r.rollout_id
    LEFT JOIN version_runs AS v ON r.resources_id = v.resources_id
),

triplet_flags AS (
    SELECT
        rollout_id,
        attempt_id,
        count(*) FILTER (WHERE no_logprobs AND NOT no_token_ids) AS no_logprobs,
        count(*) FILTER (WHERE reward_missing) AS reward_missing,
        count(*) FILTER (WHERE truncated) AS truncated_calls,
        list(DISTINCT resources_id) FILTER (WHERE resources_id IS NOT NULL) AS generated_by
    FROM triplets GROUP BY rollout_id, attempt_id
),

row_flags AS (
    SELECT
        rollout_id,
        attempt_id,
        count(*) FILTER (WHERE truncated) AS truncated_rows,
        count(*) FILTER (WHERE overlong_prompt) AS overlong_rows,
        count(*) FILTER (WHERE mixed_versions) AS mixed_version_rows
    FROM trajectories GROUP BY rollout_id, attempt_id
)

SELECT
    a.run_id,
    a.mode,
    a.resources_id,
    a.settings_id,
    count(*) AS attempts,
    count(*) FILTER (WHERE a.triplets = 0) AS attempts_without_triplets,
    sum(a.calls) AS calls,
    sum(a.selected) AS selected,
    sum(a.outside_agent) AS outside_agent,
    sum(a.other_agent) AS other_agent,
    sum(a.in_reward) AS in_reward,
    sum(a.nested) AS nested,
    sum(a.failed) AS failed_calls,
    sum(a.triplets) AS triplets,
    sum(a.no_token_ids) AS no_token_ids,
    coalesce(sum(t.no_logprobs), 0) AS no_logprobs,
    sum(a.rewards) AS rewards,
    coalesce(sum(t.reward_missing), 0) AS reward_missing,
    sum(a.rewards_not_numeric) AS rewards_not_numeric,
    sum(a.rewards_unmatched) AS rewards_unmatched,
    sum(a.rewards_unused) AS rewards_unused,
    sum(a.prefix_mismatches) AS prefix_mismatches,
    round(100.0 * sum(a.prefix_mismatches) / nullif(sum(a.selected), 0), 2) AS mismatches_per_100_calls,
    sum(a.trajectories) AS trajectories,
    coalesce(sum(t.truncated_calls), 0) AS truncated_calls,
    coalesce(sum(w.truncated_rows), 0) AS truncated_rows,
    coalesce(sum(w.overlong_rows), 0) AS overlong_rows,
    coalesce(sum(w.mixed_version_rows), 0) AS mixed_version_rows,
    sum(a.orphans + a.cycles_broken + a.duplicate_spans) AS repaired_spans,
    list_sort(list_distinct(flatten(list(coalesce(t.generated_by, []))))) AS generated_by
FROM attempts AS a
LEFT JOIN triplet_flags AS t ON a.rollout_id = t.rollout_id AND a.attempt_id = t.attempt_id
LEFT JOIN row_flags AS w ON a.rollout_id = w.rollout_id AND a.attempt_id = w.attempt_id
GROUP BY a.run_id, a.mode, a.resources_id, a.settings_id
ORDER BY a.run_id NULLS FIRST, a.mode, a.resources_id NULLS FIRST;

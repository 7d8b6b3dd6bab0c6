-- Why rollouts of a batch have no training rows: each one's latest attempt's model calls, and those with token ids.
-- $rollouts: the batch's rollout ids that have no rows.
SELECT r.rollout_id, r.status,
       count(m.call_id) AS calls,
       count(m.call_id) FILTER (WHERE len(coalesce(m.response_ids, [])) > 0) AS calls_with_tokens
FROM rollouts r
LEFT JOIN model_calls m ON m.rollout_id = r.rollout_id AND m.attempt_id = r.latest_attempt_id
WHERE list_contains($rollouts, r.rollout_id)
GROUP BY r.rollout_id, r.status
ORDER BY r.rollout_id

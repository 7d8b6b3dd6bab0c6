-- Mean reward of a set of rollouts: each rollout's summed rewards on its latest attempt, 0 when it has none.
-- $rollouts: the rollout ids.
SELECT avg(coalesce(w.total, 0.0)) AS mean_reward, count(*) AS rollouts
FROM rollouts r
LEFT JOIN (
    SELECT rollout_id, attempt_id, sum(value) AS total FROM rewards GROUP BY rollout_id, attempt_id
) w ON w.rollout_id = r.rollout_id AND w.attempt_id = r.latest_attempt_id
WHERE list_contains($rollouts, r.rollout_id)

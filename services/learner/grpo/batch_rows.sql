-- The training rows of one step's batch: every trajectory row of each rollout's latest attempt, in order.
-- $rollouts: the batch's rollout ids. Rollouts without rows (no model call, no token ids) are absent.
SELECT t.rollout_id, t.attempt_id, t.row_index, t.task_id, t.prompt_ids, t.response_ids, t.response_mask,
       t.logprobs, t.reward, t.resources_ids, t.call_resources, t.no_logprobs, t.reward_missing, t.reward_not_numeric
FROM trajectories t
JOIN rollouts r ON r.rollout_id = t.rollout_id AND r.latest_attempt_id = t.attempt_id
WHERE list_contains($rollouts, t.rollout_id)
ORDER BY t.rollout_id, t.row_index

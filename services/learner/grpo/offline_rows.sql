-- Training rows already in the log for offline retraining: trajectories of each rollout's latest attempt,
-- optionally only the rollouts a run's steps sampled ($run), only train/val ($mode), and only rows whose
-- calls were all sampled by versions $low..$high of their bundle. A user's WHERE clause is added below.
SELECT t.rollout_id, t.attempt_id, t.row_index, t.task_id, t.prompt_ids, t.response_ids, t.response_mask,
       t.logprobs, t.reward, t.resources_ids, r.end_time
FROM trajectories t
JOIN rollouts r ON r.rollout_id = t.rollout_id AND r.latest_attempt_id = t.attempt_id
WHERE t.logprobs IS NOT NULL
  AND ($mode IS NULL OR t.mode = $mode)
  AND ($run IS NULL OR t.rollout_id IN (SELECT unnest(rollout_ids) FROM step_batches WHERE run_id = $run))
  AND ($low IS NULL OR list_min(list_transform(t.resources_ids, lambda v: TRY_CAST(split_part(v, ':', -1) AS INTEGER))) >= $low)
  AND ($high IS NULL OR list_max(list_transform(t.resources_ids, lambda v: TRY_CAST(split_part(v, ':', -1) AS INTEGER))) <= $high)
  AND ($since IS NULL OR r.end_time >= $since)
  AND ($until IS NULL OR r.end_time <= $until)
  AND ({where})
ORDER BY t.rollout_id, t.row_index

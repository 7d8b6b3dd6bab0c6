-- Each rollout of an APO batch: its pinned resources, input, status, summed reward on its latest attempt
-- (0 without one), and that attempt's model calls and spans as text for the critic.
-- $rollouts: the rollout ids.
WITH wanted AS (
    SELECT rollout_id, resources_id, input, status, latest_attempt_id
    FROM rollouts
    WHERE list_contains($rollouts, rollout_id)
),
reward AS (
    SELECT w.rollout_id, sum(x.value) AS total
    FROM wanted w JOIN rewards x ON x.rollout_id = w.rollout_id AND x.attempt_id = w.latest_attempt_id
    GROUP BY w.rollout_id
),
call_text AS (
    SELECT w.rollout_id,
           string_agg('model call: ' || coalesce(CAST(c.request AS VARCHAR), '') || ' -> '
                      || coalesce(CAST(c.choices AS VARCHAR), CAST(c.response AS VARCHAR), ''),
                      chr(10) ORDER BY c.recorded_at) AS calls
    FROM wanted w JOIN model_calls c ON c.rollout_id = w.rollout_id AND c.attempt_id = w.latest_attempt_id
    GROUP BY w.rollout_id
),
span_text AS (
    SELECT w.rollout_id,
           string_agg(s.name || ' ' || coalesce(CAST(s.attributes AS VARCHAR), '{}'), chr(10) ORDER BY s.sequence_id) AS spans
    FROM wanted w JOIN spans s ON s.rollout_id = w.rollout_id AND s.attempt_id = w.latest_attempt_id
    GROUP BY w.rollout_id
)
SELECT w.rollout_id, w.resources_id, CAST(w.input AS VARCHAR) AS input, w.status,
       coalesce(r.total, 0.0) AS reward, concat_ws(chr(10), c.calls, s.spans) AS trace
FROM wanted w
LEFT JOIN reward r USING (rollout_id)
LEFT JOIN call_text c USING (rollout_id)
LEFT JOIN span_text s USING (rollout_id)
